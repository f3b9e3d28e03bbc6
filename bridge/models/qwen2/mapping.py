"""Qwen2 / Qwen2.5: the Llama layout plus biases on q, k and v."""

from bridge.models.llama.mapping import MAPPINGS as _LLAMA
from bridge.models.llama.mapping import L, M

ARCHITECTURES = ("Qwen2ForCausalLM",)
HF_MODEL_TYPE = "qwen2"  # config.json "model_type"
PROVIDER_FIELDS = {"add_qkv_bias": True}

QKV_BIAS = (
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.bias",
        (f"{L}.self_attn.q_proj.bias", f"{L}.self_attn.k_proj.bias", f"{L}.self_attn.v_proj.bias"),
    ),
)

MAPPINGS = _LLAMA + QKV_BIAS
