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
