"""OLMo 2: the Llama layout with its norms after the branches and q/k norms over whole projections.

No norm before attention or the MLP; post_attention_layernorm normalises the attention output and
post_feedforward_layernorm the MLP output, each before the residual add: in Megatron both live in the
branch's last linear (linear_proj / linear_fc2 .post_layernorm, bridge.models.post_norm). q_norm /
k_norm are RMSNorms over all heads of q / k (num_heads * head_dim, num_kv_heads * head_dim weights),
TP-sharded by heads like a column-parallel weight (bridge.models.qk_norm).
"""

from bridge.models.llama.mapping import EMBEDDINGS, L, M

ARCHITECTURES = ("Olmo2ForCausalLM",)
HF_MODEL_TYPE = "olmo2"  # config.json "model_type"
PROVIDER_FIELDS: dict = {
    "qk_layernorm": True,
    "qk_layernorm_scope": "projection",
    "layernorm_placement": "post",
}

ATTENTION = (
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.self_attn.q_proj.weight", f"{L}.self_attn.k_proj.weight", f"{L}.self_attn.v_proj.weight"),
    ),
    ("column", f"{M}.self_attention.q_layernorm.weight", f"{L}.self_attn.q_norm.weight"),
    ("column", f"{M}.self_attention.k_layernorm.weight", f"{L}.self_attn.k_norm.weight"),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
    (
        "replicated",
        f"{M}.self_attention.linear_proj.post_layernorm.weight",
        f"{L}.post_attention_layernorm.weight",
    ),
)

MLP = (
    ("gated_mlp", f"{M}.mlp.linear_fc1.weight", (f"{L}.mlp.gate_proj.weight", f"{L}.mlp.up_proj.weight")),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mlp.down_proj.weight"),
    ("replicated", f"{M}.mlp.linear_fc2.post_layernorm.weight", f"{L}.post_feedforward_layernorm.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MLP
