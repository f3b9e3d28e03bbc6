"""Gemma 2 providers with the values of the published Hugging Face configs (google/gemma-2-*)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What every Gemma 2 shares: sandwich (1 + w) RMSNorms, GeGLU (tanh gelu), embeddings scaled by
# sqrt(hidden), tied output layer, 256000 tokens, 8192 positions, eps 1e-6, rope_theta 10000,
# soft-capping 50 (attention) / 30 (logits), a 4096-key window on every other layer (layer 1 first).
_GEMMA2: dict[str, Any] = dict(
    activation_func="gelu_tanh",
    layernorm_placement="sandwich",
    layernorm_zero_centered_gamma=True,
    scale_embeddings_by_sqrt_hidden=True,
    share_embeddings_and_output_weights=True,
    vocab_size=256000,
    seq_length=8192,
    layernorm_epsilon=1e-6,
    rotary_base=10000,
    attn_logit_softcapping=50.0,
    final_logit_softcapping=30.0,
    window_size=[4095, 0],
    window_attn_skip_freq=2,
)


def gemma2_2b() -> GPTModelProvider:
    """google/gemma-2-2b."""
    return llama_style_provider(
        **_GEMMA2,
        num_layers=26,
        hidden_size=2304,
        ffn_hidden_size=9216,
        num_attention_heads=8,
        num_query_groups=4,
        kv_channels=256,
        softmax_scale=256**-0.5,
    )


def gemma2_9b() -> GPTModelProvider:
    """google/gemma-2-9b."""
    return llama_style_provider(
        **_GEMMA2,
        num_layers=42,
        hidden_size=3584,
        ffn_hidden_size=14336,
        num_attention_heads=16,
        num_query_groups=8,
        kv_channels=256,
        softmax_scale=256**-0.5,
    )


def gemma2_27b() -> GPTModelProvider:
    """google/gemma-2-27b: query_pre_attn_scalar 144 (hidden / heads), not the head dimension 128."""
    return llama_style_provider(
        **_GEMMA2,
        num_layers=46,
        hidden_size=4608,
        ffn_hidden_size=36864,
        num_attention_heads=32,
        num_query_groups=16,
        kv_channels=128,
        softmax_scale=144**-0.5,
    )
