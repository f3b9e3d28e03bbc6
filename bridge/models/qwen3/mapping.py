"""Qwen3: the Llama layout plus RMS norms on queries and keys (per head, shared across heads)."""

from bridge.models.llama.mapping import MAPPINGS as _LLAMA
from bridge.models.llama.mapping import L, M

ARCHITECTURES = ("Qwen3ForCausalLM",)
HF_MODEL_TYPE = "qwen3"  # config.json "model_type"
PROVIDER_FIELDS = {"qk_layernorm": True}

QK_NORM = (
    ("replicated", f"{M}.self_attention.q_layernorm.weight", f"{L}.self_attn.q_norm.weight"),
    ("replicated", f"{M}.self_attention.k_layernorm.weight", f"{L}.self_attn.k_norm.weight"),
)

MAPPINGS = _LLAMA + QK_NORM
