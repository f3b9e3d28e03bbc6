"""Gemma 3 text providers with the values of the published Hugging Face configs (google/gemma-3-*-pt).

gemma-3-1b is a Gemma3ForCausalLM (model_type gemma3_text); 4b, 12b and 27b are multimodal
(Gemma3ForConditionalGeneration): these presets are their language models, the values of their
config.json's text_config (the vision tower and projector are not part of them).
"""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What every Gemma 3 shares: sandwich (1 + w) RMSNorms and per-head (1 + w) q/k norms, GeGLU (tanh
# gelu), embeddings scaled by sqrt(hidden), tied output layer, eps 1e-6, no soft-capping, every 6th
# layer global (rope_theta 1e6), the others sliding-window layers with rope_local_base_freq 10000.
_GEMMA3: dict[str, Any] = dict(
    activation_func="gelu_tanh",
    layernorm_placement="sandwich",
    layernorm_zero_centered_gamma=True,
    scale_embeddings_by_sqrt_hidden=True,
    qk_layernorm=True,
    share_embeddings_and_output_weights=True,
    layernorm_epsilon=1e-6,
    rotary_base=1_000_000,
    local_rotary_base=10_000.0,
    window_attn_skip_freq=6,
    kv_channels=256,
    softmax_scale=256**-0.5,
)
# The multimodal models' text: 262208 tokens, 131072 positions, a 1024-key window, linear rope
# scaling (factor 8) on the global layers.
_MULTIMODAL_TEXT: dict[str, Any] = dict(
    vocab_size=262208, seq_length=131072, window_size=[1023, 0], seq_len_interpolation_factor=8.0
)


def gemma3_1b() -> GPTModelProvider:
    """google/gemma-3-1b-pt (text only): 262144 tokens, 32768 positions, a 512-key window, no rope scaling."""
    return llama_style_provider(
        **_GEMMA3,
        vocab_size=262144,
        seq_length=32768,
        window_size=[511, 0],
        num_layers=26,
        hidden_size=1152,
        ffn_hidden_size=6912,
        num_attention_heads=4,
        num_query_groups=1,
    )


def gemma3_4b() -> GPTModelProvider:
    """google/gemma-3-4b-pt's text_config."""
    return llama_style_provider(
        **_GEMMA3,
        **_MULTIMODAL_TEXT,
        num_layers=34,
        hidden_size=2560,
        ffn_hidden_size=10240,
        num_attention_heads=8,
        num_query_groups=4,
    )


def gemma3_12b() -> GPTModelProvider:
    """google/gemma-3-12b-pt's text_config."""
    return llama_style_provider(
        **_GEMMA3,
        **_MULTIMODAL_TEXT,
        num_layers=48,
        hidden_size=3840,
        ffn_hidden_size=15360,
        num_attention_heads=16,
        num_query_groups=8,
    )


def gemma3_27b() -> GPTModelProvider:
    """google/gemma-3-27b-pt's text_config: head_dim 128, query_pre_attn_scalar 168 (hidden / heads)."""
    return llama_style_provider(
        **{**_GEMMA3, "kv_channels": 128, "softmax_scale": 168**-0.5},
        **_MULTIMODAL_TEXT,
        num_layers=62,
        hidden_size=5376,
        ffn_hidden_size=21504,
        num_attention_heads=32,
        num_query_groups=16,
    )
