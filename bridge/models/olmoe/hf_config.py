"""OLMoE config.json rules: OlmoeConfig defaults; its experts are num_experts of intermediate_size
(no moe_intermediate_size, every layer sparse: another model's decoder_sparse_step / mlp_only_layers
are refused), top-k without renormalisation by default (norm_topk_prob false); clip_qkv (clamping
q/k/v) is refused: Megatron-Core has no such clamp."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "olmoe": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        hidden_size=2048,
        num_hidden_layers=16,
        intermediate_size=2048,
        num_attention_heads=16,
        max_position_embeddings=4096,
        vocab_size=50304,
        rms_norm_eps=1e-05,
        attention_bias=False,
        clip_qkv=None,
        num_experts=64,
        num_experts_per_tok=8,
        router_aux_loss_coef=0.01,
        norm_topk_prob=False,
    ),
}


def check(cfg: Any) -> None:
    for key, default in (("decoder_sparse_step", 1), ("mlp_only_layers", [])):
        value = get(cfg, key, default)
        if value not in (default, None):
            # OlmoeForCausalLM makes every layer a MoE layer whatever these say: reading them would
            # build dense layers the checkpoint does not have.
            raise refuse(
                key,
                value,
                "OLMoE has a MoE block in every layer; the key is not OLMoE's",
                f"remove {key} from config.json",
            )
    clip = get(cfg, "clip_qkv")
    if clip is not None:
        raise refuse(
            "clip_qkv",
            clip,
            "clamping q/k/v activations is not part of Megatron-Core's attention",
            "convert a model with clip_qkv=null (every published OLMoE has it)",
        )


def moe_hf_fields(p: Any) -> dict[str, Any]:
    """OLMoE's names of the expert keys: the experts' size is intermediate_size; no dense layers."""
    return {
        "num_experts": p.num_moe_experts,
        "intermediate_size": p.moe_ffn_hidden_size,
        "norm_topk_prob": not p.moe_router_pre_softmax,
    }
