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


@pytest.mark.slow  # a finetune and an export per case (~15 s each)
@pytest.mark.parametrize("mtp", [0, 1])
def test_finetune_from_an_mtp_folder_and_export(mtp, tmp_path, caplog):
    """A DeepSeek-V3 folder with its MTP layer: model.mtp_num_layers=1 trains it (mtp_1 loss logged) and the
    export holds the trained layer; model.mtp_num_layers=0 leaves it out (listed) and the export carries
    the original MTP tensors back byte for byte (convert_checkpoint.py export)."""
    import importlib.util
    from pathlib import Path

    import torch

    from bridge.config.compose import compose
    from bridge.parallel import runtime
    from bridge.training.pretrain import finetune
    from recipes import get_recipe
    from tests.functional.workers.convert_models import read_tensors
    from tests.functional.workers.mtp_checkpoint import save_mtp_folder
    from tests.functional.workers.train_common import SHORT_RUN

    caplog.set_level(logging.INFO)
    _, extra = save_mtp_folder("deepseek_v3", tmp_path / "hf")
    run = [o for o in SHORT_RUN if not o.startswith(("checkpoint.save", "train.global_batch_size"))]
    overrides = [
        *run, f"checkpoint.pretrained_checkpoint={tmp_path / 'hf'}", f"model.mtp_num_layers={mtp}",
        "dataset.kind=mock", "dataset.packed_sequence_size=0", "tokenizer.tokenizer_type=NullTokenizer",
        "model.seq_length=32", "train.train_iters=2", "train.global_batch_size=2",
        f"checkpoint.save={tmp_path / 'ckpt'}", "checkpoint.save_interval=2",
    ]  # fmt: skip
    cfg = compose(get_recipe("llama32_1b_sft_config")(), overrides=overrides)[0]
    if runtime.is_initialized():
        runtime.destroy_distributed()
    try:
        finetune(build_plan(cfg, 1, cuda=False))
    finally:
        runtime.destroy_distributed()
    assert ("mtp_1 loss" in caplog.text) == bool(mtp)
    assert ("left out of the model" in caplog.text) == (not mtp)
    path = Path(__file__).resolve().parents[2] / "scripts" / "conversion" / "convert_checkpoint.py"
    spec = importlib.util.spec_from_file_location("convert_checkpoint", path)
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    assert (
        cli.main(["export", "--megatron-path", str(tmp_path / "ckpt"), "--hf-path", str(tmp_path / "out")])
        == 0
    )
    runtime.destroy_distributed()
    src, out = read_tensors(tmp_path / "hf"), read_tensors(tmp_path / "out")
    assert src.keys() == out.keys()
    unchanged = [k for k in extra if torch.equal(src[k], out[k])]
    if mtp:  # trained: the MTP layer's weights moved (its norms and copies may not at this learning rate)
        assert not torch.equal(src["model.layers.2.eh_proj.weight"], out["model.layers.2.eh_proj.weight"])
    else:
        assert unchanged == list(extra)
