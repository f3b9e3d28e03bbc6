"""Layouts the dry run used to accept and Megatron-Core then refused after launch (issue 43): each is one
ConfigError before launch, Megatron-Core itself fails on the refused setting, and the fix the message
names, applied as written, is accepted."""

from __future__ import annotations

import re

import pytest

from bridge.config.container import ConfigContainer
from bridge.config.overrides import apply_overrides
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider


def tiny(*overrides: str) -> ConfigContainer:
    cfg = ConfigContainer(
        model=GPTModelProvider(
            num_layers=8, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
        )
    )
    cfg.train.train_iters, cfg.train.global_batch_size, cfg.train.micro_batch_size = 10, 16, 1
    cfg.scheduler.lr_warmup_iters = 0
    cfg.validation.eval_interval = 0
    return apply_overrides(cfg, list(overrides))


def suggested_overrides(message: str) -> list[str]:
    """The overrides a Fix: names in backticks, in order."""
    fix = message.split("Fix:", 1)[1]
    return re.findall(r"`([^`]+)`", fix)


PP2_VPP2 = ["model.pipeline_model_parallel_size=2", "model.virtual_pipeline_model_parallel_size=2"]
FIRST_LAST = ["model.num_layers_in_first_pipeline_stage=4", "model.num_layers_in_last_pipeline_stage=4"]

# name: (overrides, world size, words of the rule)
REFUSED = {
    "first and last with virtual stages on pp=2": (
        PP2_VPP2 + FIRST_LAST,
        2,
        "besides the first and the last",
    ),
    "interleaved with fewer micro batches than pp": (
        PP2_VPP2 + ["train.global_batch_size=1"],
        2,
        "groups of 2",
    ),
    "interleaved with a short last group": (
        [
            "model.pipeline_model_parallel_size=4",
            "model.virtual_pipeline_model_parallel_size=2",
            "train.global_batch_size=6",
        ],
        4,
        "last group of 2 < pp",
    ),  # fmt: skip
    "interleaved group below pp": (
        PP2_VPP2 + ["model.microbatch_group_size_per_vp_stage=1"],
        2,
        "at least pp = 2",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_before_launch_and_every_suggested_fix_is_accepted(name):
    overrides, world, words = REFUSED[name]
    with pytest.raises(ConfigError) as err:
        build_plan(tiny(*overrides), world, cuda=False)
    message = str(err.value)
    assert words in message, message
    fixes = suggested_overrides(message)
    assert fixes, message
    for fix in fixes:
        build_plan(tiny(*overrides, fix), world, cuda=False)  # raises if the fix does not work


def test_megatron_core_fails_on_the_refused_first_last_split():
    """The reference: Megatron-Core's own offset function divides by the zero middle stages."""
    import torch
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    config = TransformerConfig(
        num_layers=8,
        hidden_size=8,
        num_attention_heads=2,
        pipeline_model_parallel_size=2,
        virtual_pipeline_model_parallel_size=2,
        num_layers_in_first_pipeline_stage=4,
        num_layers_in_last_pipeline_stage=4,
        pipeline_dtype=torch.float32,
        use_cpu_initialization=True,
    )  # TransformerConfig's own checks accept it ...
    with pytest.raises(ZeroDivisionError):  # ... and the last rank fails at build time
        get_transformer_layer_offset(config, vp_stage=0, pp_rank=1)


def test_layout_repeat_count_is_refused_before_unrolling():
    with pytest.raises(ConfigError) as err:
        build_plan(
            tiny(
                "model.pipeline_model_parallel_size=2",
                "model.pipeline_model_parallel_layout='Et*999999999999|tL'",
            ),
            2,
            cuda=False,
        )
    # (refused while the override is applied or at validation: either way before any memory is taken)
    assert "repeat count" in str(err.value) and "<= 8" in str(err.value), str(err.value)


def test_layout_within_the_repeat_bound_is_accepted():
    build_plan(
        tiny("model.pipeline_model_parallel_size=2", "model.pipeline_model_parallel_layout='Et*7|tL'"),
        2,
        cuda=False,
    )
