"""GLM-4 (GLM-4-0414): the Llama layout with sandwich norms, q/k/v biases, a fused gate/up projection
and interleaved partial RoPE.

Four RMSNorms per layer: input_layernorm and post_attention_layernorm before the branches (Megatron's
input_layernorm / pre_mlp_layernorm: GLM's "post_attention" norm is the MLP's input norm, as in
Llama), post_self_attn_layernorm and post_mlp_layernorm on the branch outputs (linear_proj /
linear_fc2 .post_layernorm, bridge.models.post_norm). gate_up_proj holds [gate; up], cut per TP rank
by "gated_mlp_packed". RoPE rotates pairs of adjacent channels (Megatron's rotary_interleaved) over
the first half of each head (rotary_percent, from partial_rotary_factor in hf_config.py).
"""

from bridge.models.llama.mapping import EMBEDDINGS, L, M
from bridge.models.qwen2.mapping import QKV_BIAS

ARCHITECTURES = ("Glm4ForCausalLM",)
HF_MODEL_TYPE = "glm4"  # config.json "model_type"
PROVIDER_FIELDS: dict = {
    "layernorm_placement": "sandwich",
    "add_qkv_bias": True,
    "rotary_interleaved": True,
}

ATTENTION = (
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.input_layernorm.weight"),
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.self_attn.q_proj.weight", f"{L}.self_attn.k_proj.weight", f"{L}.self_attn.v_proj.weight"),
    ),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
    (
        "replicated",
        f"{M}.self_attention.linear_proj.post_layernorm.weight",
        f"{L}.post_self_attn_layernorm.weight",
    ),
)

MLP = (
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.post_attention_layernorm.weight"),
    ("gated_mlp_packed", f"{M}.mlp.linear_fc1.weight", f"{L}.mlp.gate_up_proj.weight"),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mlp.down_proj.weight"),
    ("replicated", f"{M}.mlp.linear_fc2.post_layernorm.weight", f"{L}.post_mlp_layernorm.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + QKV_BIAS + MLP
