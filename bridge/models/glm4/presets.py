"""GLM-4-0414 providers with the values of the published Hugging Face configs (THUDM/GLM-4-*-0414)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What every GLM-4-0414 shares: sandwich RMSNorms (before and after attention and the MLP), SwiGLU,
# biases on q/k/v only, interleaved RoPE over half of each head (base 10000), two key/value heads of
# 128, 151552 tokens, 32768 positions, eps 1e-5, untied output layer.
_GLM4: dict[str, Any] = dict(
    layernorm_placement="sandwich",
    add_qkv_bias=True,
    rotary_interleaved=True,
    rotary_percent=0.5,
    rotary_base=10000,
    num_query_groups=2,
    kv_channels=128,
    vocab_size=151552,
    seq_length=32768,
    layernorm_epsilon=1e-5,
)


def glm4_9b() -> GPTModelProvider:
    """THUDM/GLM-4-9B-0414."""
    return llama_style_provider(
        **_GLM4, num_layers=40, hidden_size=4096, ffn_hidden_size=13696, num_attention_heads=32
    )


def glm4_32b_0414() -> GPTModelProvider:
    """THUDM/GLM-4-32B-0414."""
    return llama_style_provider(
        **_GLM4, num_layers=61, hidden_size=6144, ffn_hidden_size=23040, num_attention_heads=48
    )
