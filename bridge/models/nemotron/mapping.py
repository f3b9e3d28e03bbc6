"""Nemotron (Nemotron-4, Minitron): the Llama attention, LayerNorm1P norms with biases and an MLP
without gate (up_proj -> squared ReLU -> down_proj).

LayerNorm1P computes layer_norm(x, 1 + w, b): Megatron's LayerNorm with layernorm_zero_centered_gamma
applies 1 + w to the stored w, so weights and biases copy over unchanged. up_proj is linear_fc1 split
by rows over TP like any column-parallel weight. The config translation (norm_eps, relu2, the default
half rotary) is hf_config.py here.
"""

from bridge.models.llama.mapping import L, M

ARCHITECTURES = ("NemotronForCausalLM",)
HF_MODEL_TYPE = "nemotron"  # config.json "model_type"
PROVIDER_FIELDS: dict = {
    "normalization": "LayerNorm",
    "layernorm_zero_centered_gamma": True,
    "gated_linear_unit": False,
}

EMBEDDINGS = (
    ("vocab", "embedding.word_embeddings.weight", "model.embed_tokens.weight"),
    ("vocab", "output_layer.weight", "lm_head.weight"),
    ("replicated", "decoder.final_layernorm.weight", "model.norm.weight"),
    ("replicated", "decoder.final_layernorm.bias", "model.norm.bias"),
)

ATTENTION = (
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.input_layernorm.weight"),
    ("replicated", f"{M}.input_layernorm.bias", f"{L}.input_layernorm.bias"),
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.self_attn.q_proj.weight", f"{L}.self_attn.k_proj.weight", f"{L}.self_attn.v_proj.weight"),
    ),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.post_attention_layernorm.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.bias", f"{L}.post_attention_layernorm.bias"),
)

MLP = (
    ("column", f"{M}.mlp.linear_fc1.weight", f"{L}.mlp.up_proj.weight"),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mlp.down_proj.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MLP
