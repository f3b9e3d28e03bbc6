"""Qwen3-Next config.json rules: Qwen3NextConfig defaults; Gated DeltaNet layers by layer_types and the
linear_* sizes (bridge.models.hf_translation.linear_attention); RoPE over a quarter of each head
(partial_rotary_factor 0.25, the class default); Qwen2-MoE's gated shared expert.

Multi-token prediction: the published checkpoints hold one MTP layer (`mtp.*`, mapping.MTP_HF_NAMES) that
config.json does not count (Qwen3NextConfig has no num_nextn_predict_layers; vLLM reads one). It is a
training choice (model.mtp_num_layers=1 builds and loads it, as Megatron-Bridge's recipe trains it); a model
built without it lists its tensors as left out and an export carries them back."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse
from bridge.models.hf_translation.linear_attention import gated_delta_net_fields, gated_delta_net_hf_fields
from bridge.models.qwen2_moe.hf_config import provider_fields as shared_expert_fields

PARTIAL_ROTARY_DEFAULT = 0.25

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_next": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=48,
        num_attention_heads=16,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        head_dim=256,
        attention_bias=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        decoder_sparse_step=1,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        num_experts_per_tok=10,
        num_experts=512,
        norm_topk_prob=True,
        mlp_only_layers=[],
    ),
}


def check(cfg: Any) -> None:
    if not get(cfg, "num_experts"):
        raise refuse(
            "num_experts",
            get(cfg, "num_experts"),
            "the qwen3_next mapping converts its MoE blocks (every published Qwen3-Next is a MoE)",
            "use the published config.json",
        )


def provider_fields(cfg: Any) -> dict[str, Any]:
    return gated_delta_net_fields(cfg) | shared_expert_fields(cfg)


def mtp_hf_tensors(cfg: Any, names: set[str], keep: int) -> set[str]:
    """The checkpoint's MTP tensors a model with `keep` MTP layers leaves out (it holds one: mtp.*)."""
    return {n for n in names if n.startswith("mtp.")} if keep < 1 else set()


def hf_fields(p: Any) -> dict[str, Any]:
    return gated_delta_net_hf_fields(p)
