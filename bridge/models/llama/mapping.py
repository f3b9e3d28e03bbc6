"""Llama 2 / 3 / 3.1 / 3.2: Hugging Face <-> Megatron-Core parameter names, as data.

Rows are (kind, megatron name, HF name or names). `{layer}` is the global layer index, `{expert}` the
global expert index; kinds are defined in bridge.conversion.mappings. Megatron names are those of the
local (non-TE) layer spec; the TE spec's fused-norm names are translated to them by the converter.
"""

ARCHITECTURES = ("LlamaForCausalLM",)
HF_MODEL_TYPE = "llama"  # config.json "model_type"
# Provider fields this family fixes, beyond what bridge.models.hf_translation reads from the HF config.
PROVIDER_FIELDS: dict = {}

L = "model.layers.{layer}"
M = "decoder.layers.{layer}"

EMBEDDINGS = (
    ("vocab", "embedding.word_embeddings.weight", "model.embed_tokens.weight"),
    ("vocab", "output_layer.weight", "lm_head.weight"),
    ("replicated", "decoder.final_layernorm.weight", "model.norm.weight"),
)

ATTENTION = (
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.input_layernorm.weight"),
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.self_attn.q_proj.weight", f"{L}.self_attn.k_proj.weight", f"{L}.self_attn.v_proj.weight"),
    ),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.post_attention_layernorm.weight"),
)

DENSE_MLP = (
    ("gated_mlp", f"{M}.mlp.linear_fc1.weight", (f"{L}.mlp.gate_proj.weight", f"{L}.mlp.up_proj.weight")),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mlp.down_proj.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + DENSE_MLP
