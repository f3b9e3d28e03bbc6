"""Qwen2-MoE config.json rules: Qwen2MoeConfig defaults; q/k/v biases (qkv_bias, refused when false);
a shared expert in every MoE layer, scaled by sigmoid(shared_expert_gate(x)); use_sliding_window
written as false. Its routed experts are the generic expert keys."""

from __future__ import annotations

from typing import Any

from bridge.models import transformer_fields  # read at call time: tests swap the release's fields
from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_moe": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        hidden_size=2048,
        num_hidden_layers=24,
        intermediate_size=5632,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=0,  # transformers sets 0 when use_sliding_window is false
        num_experts=60,
        num_experts_per_tok=4,
        moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632,
        norm_topk_prob=False,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        qkv_bias=True,
    ),
}


def check(cfg: Any) -> None:
    if not get(cfg, "qkv_bias", True):
        raise refuse(
            "qkv_bias",
            False,
            "the qwen2_moe mapping has q/k/v biases (every published Qwen2-MoE has them)",
            "convert a model with qkv_bias=true",
        )


def provider_fields(cfg: Any) -> dict[str, Any]:
    """The shared expert: an MLP every token goes through, scaled by sigmoid(shared_expert_gate(x))."""
    size = get(cfg, "shared_expert_intermediate_size")
    if not size or int(size) <= 0:
        raise refuse(
            "shared_expert_intermediate_size",
            size,
            "Qwen2-MoE builds a shared expert in every MoE layer, so it must be a positive size",
            "use the published config.json",
        )

    for name in ("moe_shared_expert_intermediate_size", "moe_shared_expert_gate"):
        if name not in transformer_fields.AVAILABLE_FIELDS:
            raise refuse(
                "shared_expert_intermediate_size",
                size,
                f"the gated shared expert needs TransformerConfig.{name}, which megatron-core "
                f"{transformer_fields.INSTALLED_RELEASE} does not have",
                "install a megatron-core release with it (0.16.1 and 0.19.2 have both)",
            )
    return dict(moe_shared_expert_intermediate_size=int(size), moe_shared_expert_gate=True)


def hf_fields(p: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"use_sliding_window": False}
    if p.num_moe_experts:
        out["qkv_bias"] = True
    return out
