"""Granite 3.3 providers with the values of the published Hugging Face configs (ibm-granite/granite-3.3-*)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What every Granite 3.3 shares: 40 layers, GQA with 8 key/value heads, tied embeddings, 49159
# tokens, 131072 positions, eps 1e-5, rope_theta 1e7, embeddings x 12, branch outputs x 0.22.
_GRANITE33: dict[str, Any] = dict(
    num_layers=40,
    num_attention_heads=32,
    num_query_groups=8,
    vocab_size=49159,
    seq_length=131072,
    layernorm_epsilon=1e-5,
    rotary_base=10_000_000,
    share_embeddings_and_output_weights=True,
    embedding_multiplier=12.0,
    branch_output_multiplier=0.22,
)


def granite33_2b() -> GPTModelProvider:
    """ibm-granite/granite-3.3-2b-base: attention_multiplier 1/64, logits / 8."""
    return llama_style_provider(
        **_GRANITE33,
        hidden_size=2048,
        ffn_hidden_size=8192,
        softmax_scale=0.015625,
        logits_divisor=8.0,
    )


def granite33_8b() -> GPTModelProvider:
    """ibm-granite/granite-3.3-8b-base: attention_multiplier 1/128, logits / 16."""
    return llama_style_provider(
        **_GRANITE33,
        hidden_size=4096,
        ffn_hidden_size=12800,
        softmax_scale=0.0078125,
        logits_divisor=16.0,
    )
