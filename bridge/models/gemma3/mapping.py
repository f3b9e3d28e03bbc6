"""Gemma 3 (text): Gemma 2's layout (sandwich (1 + w) norms, GeGLU) plus per-head (1 + w) q/k norms.

q_norm / k_norm are RMSNorms over head_dim shared by all heads: Megatron-Core's qk_layernorm
(q_layernorm / k_layernorm, replicated), with layernorm_zero_centered_gamma as every other norm. The
config translation (two RoPEs by layer type, windows, scale, activation) is hf_config.py here.
"""

from bridge.models.gemma2.mapping import ATTENTION as GEMMA2_ATTENTION
from bridge.models.gemma2.mapping import MLP
from bridge.models.llama.mapping import EMBEDDINGS, L, M

ARCHITECTURES = ("Gemma3ForCausalLM",)
HF_MODEL_TYPE = "gemma3_text"  # config.json "model_type"
PROVIDER_FIELDS: dict = {
    "layernorm_placement": "sandwich",
    "layernorm_zero_centered_gamma": True,
    "scale_embeddings_by_sqrt_hidden": True,
    "qk_layernorm": True,
}

ATTENTION = GEMMA2_ATTENTION + (
    ("replicated", f"{M}.self_attention.q_layernorm.weight", f"{L}.self_attn.q_norm.weight"),
    ("replicated", f"{M}.self_attention.k_layernorm.weight", f"{L}.self_attn.k_norm.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MLP

# Gemma 4 text (transformers' Gemma4ForCausalLM / Gemma4TextConfig) against Megatron-Core 0.16.1 and 0.19.2.
REFUSED_ARCHITECTURES = {
    "Gemma4ForCausalLM": (
        "Gemma 4: its full-attention layers have their own head size (global_head_dim, 512 by default, "
        "against head_dim 256 on the sliding layers) and key/value heads (num_global_key_value_heads, "
        "with attention_k_eq_v the values are the projected keys), its values pass through a weightless RMSNorm (v_norm), and "
        "its layers add per-layer input embeddings (hidden_size_per_layer_input), share key/value caches "
        "(num_kv_shared_layers) and scale their output (layer_scalar); megatron-core 0.16.1 and 0.19.2 "
        "build one kv_channels and one num_query_groups for every layer of a GPTModel and have no value "
        "norm, per-layer embedding or cross-layer key/value sharing, so it does not convert. Fix: none in "
        "bridge for these releases; Gemma 3 (Gemma3ForCausalLM) converts"
    ),
}
