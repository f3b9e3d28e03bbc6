"""GPU performance settings and fp8: what the plan turns on for a machine, and why it turns the rest off.

The machines are described by hand (bridge.config.environment.Environment), so the GPU decisions are
checked here on CPU; what they build on a GPU is checked by the gpu-marked tests.
"""

from __future__ import annotations

import dataclasses

import pytest

from bridge.config import performance
from bridge.config.compose import compose
from bridge.config.environment import Environment
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from recipes import get_recipe
from recipes import gpu_settings as recipe_settings
from recipes.llama import LLAMA_70B

CPU = Environment.cpu()
H100_TE = Environment(
    cuda=True, device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
    packages={"transformer_engine": "2.8.0", "fused_weight_gradient_mlp_cuda": "0.1"},
)  # fmt: skip
H100_BARE = dataclasses.replace(H100_TE, packages={})
A100_TE = Environment(
    cuda=True, device_name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0),
    packages={"transformer_engine": "2.8.0"},
)  # fmt: skip


def plan(recipe: str, world: int, env: Environment, *overrides: str):
    cfg, _ = compose(get_recipe(recipe)(), overrides=list(overrides))
    return build_plan(cfg, world, env=env)


def states(p) -> dict[str, performance.SettingState]:
    return {s.field: s for s in p.performance}


def test_on_cpu_every_setting_is_off_and_the_model_is_the_preset_one():
    # the reference: the same recipe built from the bare preset, without Megatron-Bridge's GPU settings
    p = plan("llama31_70b_pretrain_config", 128, CPU)
    assert p.performance and all(not s.active and s.reason == "needs CUDA" for s in p.performance)
    bare_cfg, _ = compose(get_recipe("llama31_70b_pretrain_config")())
    for setting in performance.SETTINGS:
        if setting.requested(getattr(bare_cfg.model, setting.field)):
            setattr(bare_cfg.model, setting.field, setting.off)
    bare = build_plan(bare_cfg, 128, env=CPU).provider
    assert dataclasses.asdict(p.provider) == dataclasses.asdict(bare)


def test_on_h100_with_transformer_engine_the_70b_recipe_runs_all_of_them():
    p = plan("llama31_70b_pretrain_config", 128, H100_TE)
    s = states(p)
    assert all(state.active for state in p.performance), [x.describe() for x in p.performance]
    assert set(s) == set(LLAMA_70B)
    m = p.provider
    assert m.tp_comm_overlap and m.persist_layer_norm and m.cross_entropy_fusion_impl == "te"
    assert (
        m.overlap_p2p_comm and not m.batch_p2p_comm
    )  # the interleaved schedule's overlap, as Megatron-Bridge
    assert p.config.distributed.tp_comm_overlap_cfg["proj_fprop"]["num_splits"] == 4
    from bridge.training.comm_overlap import userbuffer_shape

    assert userbuffer_shape(p) == [8192 * 1 // 2, 8192]  # one micro batch's tokens on a CP rank x hidden


def test_cuda_without_transformer_engine_keeps_the_kernels_that_need_none():
    p = plan("llama31_8b_pretrain_config", 8, H100_BARE)
    s = states(p)
    for field in (
        "bias_activation_fusion",
        "bias_dropout_fusion",
        "masked_softmax_fusion",
        "cross_entropy_loss_fusion",
    ):
        assert s[field].active
    for field in (
        "persist_layer_norm",
        "apply_rope_fusion",
        "cross_entropy_fusion_impl",
    ):
        assert not s[field].active and "needs Transformer Engine" in s[field].reason
    wgrad = s["gradient_accumulation_fusion"]
    assert not wgrad.active and "apex's fused_weight_gradient_mlp_cuda" in wgrad.reason
    assert p.provider.cross_entropy_fusion_impl == "native" and not p.provider.persist_layer_norm
    assert not s["overlap_p2p_comm"].active and "interleaved" in s["overlap_p2p_comm"].reason


def test_moe_kernels_need_their_packages_and_expert_parallelism():
    s = states(plan("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", 64, H100_TE))
    assert s["moe_grouped_gemm"].active and s["moe_permute_fusion"].active
    assert not s["moe_token_dispatcher_type"].active and "DeepEP" in s["moe_token_dispatcher_type"].reason
    p = plan("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", 64, H100_TE)
    assert p.provider.moe_token_dispatcher_type == "alltoall"  # Megatron-Bridge's fallback

    with_deep_ep = dataclasses.replace(H100_TE, packages={**H100_TE.packages, "deep_ep": "1.1.0"})
    p = plan("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", 64, with_deep_ep)
    assert states(p)["moe_token_dispatcher_type"].active and p.provider.moe_token_dispatcher_type == "flex"

    old_te = dataclasses.replace(H100_TE, packages={"transformer_engine": "2.0.0"})
    s = states(plan("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", 64, old_te))
    assert not s["moe_permute_fusion"].active and ">= 2.1" in s["moe_permute_fusion"].reason


def test_a_setting_without_its_layout_is_reported_with_the_reason():
    p = plan("llama32_1b_pretrain_config", 8, H100_TE, "model.tp_comm_overlap=true")
    s = states(p)["tp_comm_overlap"]
    assert not s.active and "tensor_model_parallel_size > 1 with sequence_parallel" in s.reason
    assert not p.provider.tp_comm_overlap
    p = plan("llama32_1b_pretrain_config", 8, H100_TE, "distributed.strategy=fsdp2")
    s = states(p)["gradient_accumulation_fusion"]
    assert not s.active and "gradient buffers" in s.reason and "fsdp2" in s.reason


def test_the_dry_run_lines_group_the_settings_by_reason():
    lines = [
        line
        for line in plan("llama31_8b_pretrain_config", 8, H100_BARE).summary_lines()
        if "performance" in line
    ]
    assert lines[0].startswith("performance: active: ") and "bias_activation_fusion=True" in lines[0]
    assert any(line.startswith("performance: inactive (needs Transformer Engine") for line in lines)
    assert any("overlap_p2p_comm=True" in line and "interleaved" in line for line in lines)
    assert "device: cuda: NVIDIA H100 80GB HBM3, compute capability 9.0" in "\n".join(plan(
        "llama31_8b_pretrain_config", 8, H100_BARE).summary_lines())  # fmt: skip


def test_recipe_settings_reject_a_field_that_is_not_one():
    from bridge.models.llama.presets import llama32_1b

    with pytest.raises(ConfigError, match="bias_activation_fusoin"):
        recipe_settings.apply(llama32_1b(), {"bias_activation_fusoin": True})


# ---- fp8 ------------------------------------------------------------------------------------------


def test_fp8_delayed_scaling_on_h100_sets_megatron_bridge_values():
    p = plan(
        "llama32_1b_pretrain_config",
        8,
        H100_TE,
        "mixed_precision.precision=bf16_with_fp8_delayed_scaling_mixed",
    )
    assert (p.precision.name, p.precision.fp8, p.precision.compute) == ("bf16", "delayed", "fp8")
    m = p.provider
    assert (m.fp8, m.fp8_recipe, m.fp8_amax_history_len, m.fp8_amax_compute_algo) == (
        "hybrid",
        "delayed",
        1024,
        "max",
    )
    assert m.bf16 and not m.fp16


def test_fp8_current_scaling_keeps_the_first_and_last_layers_in_bf16():
    p = plan(
        "llama32_1b_pretrain_config",
        8,
        H100_TE,
        "mixed_precision.precision=bf16_with_fp8_current_scaling_mixed",
    )
    m = p.provider
    assert (m.fp8_recipe, m.first_last_layers_bf16, m.num_layers_at_start_in_bf16, m.num_layers_at_end_in_bf16) == (
        "tensorwise", True, 1, 1,
    )  # fmt: skip


def test_fp8_on_cpu_trains_in_fp32_with_a_warning():
    p = plan(
        "llama32_1b_pretrain_config", 8, CPU, "mixed_precision.precision=bf16_with_fp8_current_scaling_mixed"
    )
    assert (p.precision.name, p.precision.fp8, p.provider.fp8) == ("fp32", None, None)
    assert any("needs CUDA; training in fp32" in w for w in p.warnings)


@pytest.mark.parametrize(
    "env, precision, message",
    [
        (
            H100_BARE,
            "bf16_with_fp8_delayed_scaling_mixed",
            "runs on Transformer Engine, which is not installed",
        ),
        (
            A100_TE,
            "bf16_with_fp8_current_scaling_mixed",
            "compute capability >= 8.9; NVIDIA A100-SXM4-80GB has 8.0",
        ),
        (H100_TE, "bf16_with_mxfp8_mixed", "compute capability >= 10.0"),
    ],
)
def test_fp8_refusals_name_the_field_and_the_fix(env, precision, message):
    with pytest.raises(ConfigError) as err:
        plan("llama32_1b_pretrain_config", 8, env, f"mixed_precision.precision={precision}")
    text = str(err.value)
    assert (
        text.startswith(f"mixed_precision.precision = '{precision}'") and message in text and "Fix:" in text
    )


def test_model_fp8_is_not_a_second_source_of_the_precision():
    with pytest.raises(ConfigError, match=r"model.fp8 = 'hybrid'.*one source of the training dtype"):
        plan("llama32_1b_pretrain_config", 8, H100_TE, "model.fp8=hybrid")


def test_environment_versions_and_this_machine():
    env = Environment(cuda=True, packages={"transformer_engine": "2.8.0+cu12", "deep_ep": "unknown"})
    assert env.version("transformer_engine") == (2, 8, 0) and env.version("deep_ep") == (0,)
    assert env.version("grouped_gemm") == (0,) and not env.has("grouped_gemm")
    assert Environment.detect(cuda=False) == CPU
