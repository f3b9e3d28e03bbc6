"""StarCoder2: LayerNorms with biases, biases on q/k/v, o_proj and both MLP linears, and an MLP without
gate (c_fc -> tanh GELU -> c_proj).

Megatron's add_bias_linear builds every one of those biases: linear_qkv's is cut per query group like
its weight ("qkv"), linear_fc1's is split over TP with its rows ("column"); the row-parallel
linear_proj and linear_fc2 add their whole bias after the reduction, so it is "replicated".
"""

from bridge.models.llama.mapping import L, M
from bridge.models.nemotron.mapping import EMBEDDINGS  # embeddings and a final LayerNorm with bias
from bridge.models.qwen2.mapping import QKV_BIAS

ARCHITECTURES = ("Starcoder2ForCausalLM",)
HF_MODEL_TYPE = "starcoder2"  # config.json "model_type"
PROVIDER_FIELDS: dict = {
    "normalization": "LayerNorm",
    "add_bias_linear": True,
    "add_qkv_bias": True,
    "gated_linear_unit": False,
}

ATTENTION = (
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.input_layernorm.weight"),
    ("replicated", f"{M}.input_layernorm.bias", f"{L}.input_layernorm.bias"),
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.self_attn.q_proj.weight", f"{L}.self_attn.k_proj.weight", f"{L}.self_attn.v_proj.weight"),
    ),
    *QKV_BIAS,
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
    ("replicated", f"{M}.self_attention.linear_proj.bias", f"{L}.self_attn.o_proj.bias"),
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.post_attention_layernorm.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.bias", f"{L}.post_attention_layernorm.bias"),
)

MLP = (
    ("column", f"{M}.mlp.linear_fc1.weight", f"{L}.mlp.c_fc.weight"),
    ("column", f"{M}.mlp.linear_fc1.bias", f"{L}.mlp.c_fc.bias"),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mlp.c_proj.weight"),
    ("replicated", f"{M}.mlp.linear_fc2.bias", f"{L}.mlp.c_proj.bias"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MLP
