"""EXAONE 4: OLMo 2's norms after the branches (none before) with per-head q/k RMSNorms.

post_attention_layernorm / post_feedforward_layernorm normalise each branch's output before the
residual add (linear_proj / linear_fc2 .post_layernorm, bridge.models.post_norm). q_norm / k_norm are
RMSNorms over head_dim shared by all heads: Megatron-Core's qk_layernorm (replicated). The local /
global attention pattern (windows, RoPE-less global layers) is read in hf_config.py here.
"""

from bridge.models.llama.mapping import EMBEDDINGS, L, M
from bridge.models.olmo2.mapping import MLP

ARCHITECTURES = ("Exaone4ForCausalLM",)
HF_MODEL_TYPE = "exaone4"  # config.json "model_type"
PROVIDER_FIELDS: dict = {"qk_layernorm": True, "layernorm_placement": "post"}

ATTENTION = (
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.self_attn.q_proj.weight", f"{L}.self_attn.k_proj.weight", f"{L}.self_attn.v_proj.weight"),
    ),
    ("replicated", f"{M}.self_attention.q_layernorm.weight", f"{L}.self_attn.q_norm.weight"),
    ("replicated", f"{M}.self_attention.k_layernorm.weight", f"{L}.self_attn.k_norm.weight"),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
    (
        "replicated",
        f"{M}.self_attention.linear_proj.post_layernorm.weight",
        f"{L}.post_attention_layernorm.weight",
    ),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MLP
