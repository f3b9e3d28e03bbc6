"""Gemma 2: the Llama layout with sandwich norms, Gemma's (1 + w) RMSNorm, GeGLU and soft-capping.

Four norms per layer: input_layernorm and pre_feedforward_layernorm before the branches (Megatron's
input_layernorm / pre_mlp_layernorm), post_attention_layernorm and post_feedforward_layernorm on the
branch outputs (linear_proj / linear_fc2 .post_layernorm, bridge.models.post_norm). Every norm applies
(1 + w) to the stored w (layernorm_zero_centered_gamma), so weights copy over unchanged. The config
translation (activation, softmax scale, soft-capping, sliding-window layers) is hf_config.py here.
"""

from bridge.models.llama.mapping import EMBEDDINGS, L, M

ARCHITECTURES = ("Gemma2ForCausalLM",)
HF_MODEL_TYPE = "gemma2"  # config.json "model_type"
PROVIDER_FIELDS: dict = {
    "layernorm_placement": "sandwich",
    "layernorm_zero_centered_gamma": True,
    "scale_embeddings_by_sqrt_hidden": True,
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
        f"{L}.post_attention_layernorm.weight",
    ),
)

MLP = (
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.pre_feedforward_layernorm.weight"),
    ("gated_mlp", f"{M}.mlp.linear_fc1.weight", (f"{L}.mlp.gate_proj.weight", f"{L}.mlp.up_proj.weight")),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mlp.down_proj.weight"),
    ("replicated", f"{M}.mlp.linear_fc2.post_layernorm.weight", f"{L}.post_feedforward_layernorm.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MLP
