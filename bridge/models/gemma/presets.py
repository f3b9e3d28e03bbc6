"""Gemma 1 providers with the values of the published Hugging Face configs (google/gemma-*)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What every Gemma 1 shares: pre-norm (1 + w) RMSNorms, GeGLU (tanh gelu), embeddings scaled by
# sqrt(hidden), tied output layer, head dimension 256, 256000 tokens, 8192 positions, eps 1e-6,
# rope_theta 10000.
_GEMMA: dict[str, Any] = dict(
    activation_func="gelu_tanh",
    layernorm_zero_centered_gamma=True,
    scale_embeddings_by_sqrt_hidden=True,
    share_embeddings_and_output_weights=True,
    kv_channels=256,
    vocab_size=256000,
    seq_length=8192,
    layernorm_epsilon=1e-6,
    rotary_base=10000,
)


def gemma_2b() -> GPTModelProvider:
    """google/gemma-2b (multi-query attention: one key/value head)."""
    return llama_style_provider(
        **_GEMMA,
        num_layers=18,
        hidden_size=2048,
        ffn_hidden_size=16384,
        num_attention_heads=8,
        num_query_groups=1,
    )


def gemma_7b() -> GPTModelProvider:
    """google/gemma-7b (16 heads of 256: attention width 4096 over a hidden size of 3072)."""
    return llama_style_provider(
        **_GEMMA,
        num_layers=28,
        hidden_size=3072,
        ffn_hidden_size=24576,
        num_attention_heads=16,
        num_query_groups=16,
    )
