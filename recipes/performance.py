"""Megatron-Bridge's published GPU performance settings, per model family, as TransformerConfig values.

Sources (Megatron-Bridge's recipes and model bridges): the Llama bridge turns on bias-activation,
masked-softmax, persistent layer-norm, bias-dropout and RoPE fusion; its H100 pretraining recipes (Llama 3,
Qwen3, Qwen3-MoE) fuse the cross-entropy with Transformer Engine's kernel, Gemma 2's with the native one;
its GPT provider accumulates weight gradients in the GEMM when the kernels are there; the Qwen3-MoE and
DeepSeek bridges use grouped GEMM and fused permutation, and the Qwen3-MoE recipes the flex dispatcher
with DeepEP; the Llama 3 70B recipe overlaps TP communication with userbuffers
(`userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192`), and its pipeline overlap sends / receives with the
interleaved schedule. The plan turns each on only where its pieces are present and reports the rest
(bridge.config.performance); on CPU all are off.
"""

from __future__ import annotations

from typing import Any

from bridge.config import performance
from bridge.errors import ConfigError

# every dense model: Megatron-Bridge's GPT provider defaults
COMMON = dict(masked_softmax_fusion=True, gradient_accumulation_fusion=True)
LLAMA_FUSIONS = dict(
    bias_activation_fusion=True,
    bias_dropout_fusion=True,
    persist_layer_norm=True,
    apply_rope_fusion=True,
)
TE_CROSS_ENTROPY = dict(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te")
NATIVE_CROSS_ENTROPY = dict(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native")
MOE_KERNELS = dict(moe_grouped_gemm=True, moe_permute_fusion=True)
FLEX_DISPATCHER = dict(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep")
PIPELINE_OVERLAP = dict(overlap_p2p_comm=True)  # active with the interleaved schedule only

LLAMA = {**COMMON, **LLAMA_FUSIONS, **TE_CROSS_ENTROPY, **PIPELINE_OVERLAP}
QWEN3 = {**COMMON, **LLAMA_FUSIONS, **TE_CROSS_ENTROPY, **PIPELINE_OVERLAP}
QWEN2 = {**COMMON, **LLAMA_FUSIONS, **NATIVE_CROSS_ENTROPY, **PIPELINE_OVERLAP}
QWEN3_MOE = {**QWEN3, **MOE_KERNELS, **FLEX_DISPATCHER}
MIXTRAL = {**COMMON, **LLAMA_FUSIONS, **TE_CROSS_ENTROPY, **MOE_KERNELS, **PIPELINE_OVERLAP}
GEMMA2 = {**COMMON, **NATIVE_CROSS_ENTROPY, **PIPELINE_OVERLAP}
LLAMA_70B = {**LLAMA, "tp_comm_overlap": True}  # + distributed.tp_comm_overlap_cfg (recipes/llama.py)

# Transformer Engine's ub_cfgs for Llama 3 70B on H100 (hidden 8192, TP4, micro batch 1, 8192 tokens)
USERBUFFERS_BF16_H100_H8192_TP4_MBS1_SEQ8192 = {
    "qkv_dgrad": {"method": "bulk", "num_sm": 4, "cga_size": 2, "set_sm_margin": False},
    "qkv_wgrad": {"method": "bulk", "num_sm": 24, "cga_size": 2, "set_sm_margin": False},
    "fc1_dgrad": {"method": "bulk", "num_sm": 2, "cga_size": 2, "set_sm_margin": False},
    "fc1_wgrad": {"method": "bulk", "num_sm": 4, "cga_size": 2, "set_sm_margin": False},
    "qkv_fprop": {"method": "ring_exchange", "aggregate": False},
    "proj_dgrad": {"method": "ring_exchange", "aggregate": False},
    "fc1_fprop": {"method": "ring_exchange", "aggregate": False},
    "fc2_dgrad": {"method": "ring_exchange", "aggregate": False},
    "proj_fprop": {"method": "pipeline", "num_sm": 24, "cga_size": 2, "num_splits": 4, "set_sm_margin": True},
    "fc2_fprop": {"method": "pipeline", "num_sm": 16, "cga_size": 2, "num_splits": 4, "set_sm_margin": True},
}
# ... and for Llama 3.1 405B (hidden 16384, TP8, CP2, micro batch 1, 8192 tokens): fewer SMs on three GEMMs
USERBUFFERS_BF16_H100_H16384_TP8_CP2_MBS1_SEQ8192 = {
    **USERBUFFERS_BF16_H100_H8192_TP4_MBS1_SEQ8192,
    "qkv_dgrad": {"method": "bulk", "num_sm": 2, "cga_size": 2, "set_sm_margin": False},
    "fc1_wgrad": {"method": "bulk", "num_sm": 2, "cga_size": 2, "set_sm_margin": False},
    "fc2_fprop": {"method": "pipeline", "num_sm": 8, "cga_size": 2, "num_splits": 4, "set_sm_margin": True},
}

# the model fields a recipe may set here: the plan's performance settings and what goes with them
_ALLOWED = set(performance.BY_FIELD) | {"moe_flex_dispatcher_backend"}


def apply(model: Any, settings: dict[str, Any]) -> Any:
    """Set `settings` on the provider `model` (only performance settings: a typo is an error)."""
    unknown = sorted(set(settings) - _ALLOWED)
    if unknown:
        raise ConfigError(
            f"recipes.performance: {unknown} are not GPU performance settings ({sorted(_ALLOWED)})"
        )
    for key, value in settings.items():
        setattr(model, key, value)
    return model
