"""Training with multi-token prediction: Megatron-Core's MTP block trains beside the LM (model.mtp_num_layers),
its loss logged beside the LM loss as "mtp_1 loss"; model.mtp_num_layers=0 trains without it."""

from __future__ import annotations

import logging
import math

import pytest

from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError


def _train(*overrides):
    from bridge.parallel import runtime
    from bridge.training.pretrain import pretrain  # the function (the package attribute can be the submodule)
    from tests.functional.workers.train_common import tiny_config

    if runtime.is_initialized():
        runtime.destroy_distributed()
    try:
        return pretrain(
            build_plan(tiny_config("train.train_iters=2", "dataset.kind=mock", *overrides), 1, cuda=False)
        )
    finally:
        runtime.destroy_distributed()


@pytest.mark.slow  # two short training runs (~17 s); CI's full suite runs it on both legs
def test_mtp_loss_is_logged_beside_the_lm_loss(caplog):
    caplog.set_level(logging.INFO)
    result = _train("model.mtp_num_layers=1", "logger.log_interval=1")
    for it in (1, 2):
        mtp = result.metrics[it]["mtp_1 loss"]
        # a fresh model predicts about uniformly: both losses near log(vocab)
        assert math.isfinite(mtp) and abs(mtp - result.losses[it]) < 1.0, (mtp, result.losses[it])
    assert "mtp_1 loss" in caplog.text and "lm loss" in caplog.text
    plain = _train("model.mtp_num_layers=0")
    assert not any("mtp_1 loss" in m for m in plain.metrics.values())


def test_mtp_layout_rules_are_checked_before_launch():
    from tests.functional.workers.train_common import tiny_config

    cfg = tiny_config(
        "model.mtp_num_layers=1", "model.pipeline_model_parallel_size=2", "distributed.pp_schedule=gpipe"
    )
    with pytest.raises(ConfigError, match=r"model.mtp_num_layers.*torch.distributed.pipelining"):
        build_plan(cfg, 2, cuda=False)


def test_a_layout_string_places_every_mtp_layer_in_the_last_stage():
    from bridge.parallel.stages import StageSplit, stage_layers

    assert stage_layers(4, 2, None, StageSplit(layout="Ett|ttmL"), mtp_num_layers=1) == ((2,), (2,))
    with pytest.raises(ConfigError, match="every MTP layer m in the last pipeline stage"):
        stage_layers(4, 3, None, StageSplit(layout="Ettt|tm|L"), mtp_num_layers=1)
