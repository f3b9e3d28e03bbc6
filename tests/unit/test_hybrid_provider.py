"""MambaModelProvider (the hybrid provider kind): its pattern and size rules, before anything is built,
and the kernel choice of bridge.parallel.ssm_backend."""

from __future__ import annotations

import pytest

from bridge.errors import ConfigError
from bridge.models.hybrid_provider import MambaModelProvider
from bridge.models.provider_layout import derive_layout


def tiny(**kw) -> MambaModelProvider:
    fields = dict(
        num_layers=4,
        hybrid_override_pattern="M*M-",
        hidden_size=64,
        ffn_hidden_size=96,
        num_attention_heads=4,
        num_query_groups=2,
        vocab_size=250,
        mamba_state_dim=16,
        mamba_head_dim=16,
        mamba_num_groups=2,
        mamba_num_heads=8,
    )
    return MambaModelProvider(**(fields | kw))


def test_a_valid_hybrid_finalizes_and_splits_its_pattern_over_stages():
    p = tiny(pipeline_model_parallel_size=2)
    p.finalize()
    assert p.stage_patterns() == ["M*", "M-"]
    p = tiny(
        hybrid_override_pattern="M*M-M-",
        num_layers=6,
        pipeline_model_parallel_size=2,
        num_layers_in_first_pipeline_stage=2,
    )
    assert p.stage_patterns() == ["M*", "M-M-"]
    assert derive_layout(p, 4).pp == 2


@pytest.mark.parametrize(
    "fields, field, words",
    [
        (dict(hybrid_override_pattern=None), "hybrid_override_pattern", "needs its layer pattern"),
        (dict(hybrid_override_pattern="M*X-"), "hybrid_override_pattern", "'X'"),
        (dict(hybrid_override_pattern="M*|M-"), "hybrid_override_pattern", "pipeline-stage separators"),
        (dict(num_layers=5), "num_layers", "has 4 layers"),
        (dict(hybrid_override_pattern="M*ME"), "num_moe_experts", "need experts"),
        (dict(num_moe_experts=4), "num_moe_experts", "no MoE layer"),
        (dict(mamba_num_groups=3), "mamba_num_groups", "split evenly"),
        (dict(tensor_model_parallel_size=4), "tensor_model_parallel_size", "mamba_num_groups=2"),
        (
            dict(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2),
            "virtual_pipeline_model_parallel_size",
            "no virtual pipeline",
        ),
        (dict(context_parallel_size=2), "context_parallel_size", "MambaContextParallel"),
        (dict(mamba_chunk_size=0), "mamba_chunk_size", "positive"),
    ],
)
def test_each_rule_names_its_field(fields, field, words):
    with pytest.raises(ConfigError, match=f"model.{field}") as err:
        tiny(**fields).finalize()
    assert words in str(err.value)


def test_a_typo_is_refused():
    with pytest.raises(ConfigError, match="did you mean mamba_chunk_size"):
        tiny().mamba_chunk_sise = 64


def test_cuda_without_mamba_ssm_names_the_package(monkeypatch):
    import importlib.util

    import torch

    from bridge.parallel import ssm_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mamba_ssm" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"needs mamba_ssm.*pip install mamba-ssm"):
        ssm_backend.ensure_ssm_kernels()


def test_lora_on_a_hybrid_checks_its_targets_against_the_pattern():
    from bridge.config.finetune_rules import check_peft
    from bridge.config.overrides import apply_overrides
    from recipes.llama import llama32_1b_pretrain_config
    from recipes.nemotron_h import nemotronh_4b_sft_config

    peft = ["peft.scheme=lora", "checkpoint.pretrained_checkpoint=/x"]
    every = "peft.target_modules=[linear_qkv,linear_proj,linear_fc1,linear_fc2,in_proj,out_proj]"
    check_peft(apply_overrides(nemotronh_4b_sft_config(), [*peft, every]))  # M, * and - layers: all six
    no_mlp = apply_overrides(nemotronh_4b_sft_config(), [*peft, every, "model.hybrid_override_pattern=M*M*"])
    no_mlp.model.num_layers = 4
    with pytest.raises(ConfigError, match=r"linear_fc1, linear_fc2: no layer of the model has it"):
        check_peft(no_mlp)
    gpt = apply_overrides(llama32_1b_pretrain_config(), [*peft, "peft.target_modules=[linear_qkv,out_proj]"])
    with pytest.raises(ConfigError, match=r"peft.target_modules.*out_proj: no layer of the model has it"):
        check_peft(gpt)


def test_a_recipe_dry_runs_with_the_pattern_split_over_its_stages():
    from bridge.config.run_plan import build_plan
    from recipes.nemotron_h import nemotronh_47b_pretrain_config

    cfg = nemotronh_47b_pretrain_config()
    cfg.model.pipeline_model_parallel_size = 2  # as its published SFT layout (TP8 PP2)
    plan = build_plan(cfg, 16)
    assert (plan.layout.tp, plan.layout.pp) == (8, 2)
    first, second = plan.provider.stage_patterns()
    assert first + second == plan.provider.hybrid_override_pattern and len(first) == len(second) == 49
    assert f"hybrid layers per stage: {first} | {second}" in plan.summary_lines()


def test_a_gpt_recipe_started_from_a_hybrid_folder_becomes_the_hybrid_kind(tmp_path):
    """checkpoint.pretrained_checkpoint=<NemotronH folder> on a GPT recipe: the model section takes the
    folder's kind (the recipe's parallel and run fields carried over), not a GPT section with hybrid fields."""
    from bridge.config.compose import compose
    from recipes.llama import llama32_1b_pretrain_config
    from tests.functional.workers.convert_models import save_hf_model

    save_hf_model("nemotron_h", tmp_path / "hf", with_tokenizer=False)
    cfg, _ = compose(
        llama32_1b_pretrain_config(),
        overrides=[f"checkpoint.pretrained_checkpoint={tmp_path / 'hf'}", "model.seq_length=64"],
    )
    assert type(cfg.model) is MambaModelProvider
    assert cfg.model.hybrid_override_pattern == "M*M-" and cfg.model.mamba_num_groups == 2
    assert cfg.model.seq_length == 64 and cfg.model.hidden_size == 64
