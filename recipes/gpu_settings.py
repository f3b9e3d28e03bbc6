"""The bundles of GPU performance settings Megatron-Bridge's recipes turn on, as TransformerConfig values;
each family's recipe module composes its own from them (recipes/<family>.py).

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
# the fusions Megatron-Bridge's Llama bridge turns on, which its Qwen and Mixtral recipes share
LAYER_FUSIONS = dict(
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

# the model fields a recipe may set here: the plan's performance settings and what goes with them
_ALLOWED = set(performance.BY_FIELD) | {"moe_flex_dispatcher_backend"}


def apply(model: Any, settings: dict[str, Any]) -> Any:
    """Set `settings` on the provider `model` (only performance settings: a typo is an error)."""
    unknown = sorted(set(settings) - _ALLOWED)
    if unknown:
        raise ConfigError(
            f"recipes.gpu_settings: {unknown} are not GPU performance settings ({sorted(_ALLOWED)})"
        )
    for key, value in settings.items():
        setattr(model, key, value)
    return model
