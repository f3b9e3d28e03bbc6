"""Llama 2 / 3 / 3.1 / 3.2 providers with the values of the published Hugging Face configs."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider

# What every Llama-architecture model shares (also Mistral, Mixtral, Qwen2/3): pre-norm RMSNorm,
# SwiGLU MLP, RoPE, no linear biases, no dropout.
LLAMA_STYLE: dict[str, Any] = dict(
    normalization="RMSNorm",
    activation_func="silu",
    gated_linear_unit=True,
    add_bias_linear=False,
    position_embedding_type="rope",
    hidden_dropout=0.0,
    attention_dropout=0.0,
    init_method_std=0.02,
    make_vocab_size_divisible_by=128,
)

# HF rope_scaling {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
# "original_max_position_embeddings": 8192} shared by Llama 3.1 and 3.2; only the factor differs.
_LLAMA3_ROPE = dict(
    rope_scaling=True,
    rope_scaling_low_freq_factor=1.0,
    rope_scaling_high_freq_factor=4.0,
    rope_scaling_original_max_position_embeddings=8192,
)


def llama_style_provider(**fields: Any) -> GPTModelProvider:
    """A GPTModelProvider with the Llama-architecture defaults, overridden by `fields`."""
    return GPTModelProvider(**{**LLAMA_STYLE, **fields})


def llama2_7b() -> GPTModelProvider:
    """meta-llama/Llama-2-7b-hf."""
    return llama_style_provider(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_query_groups=32,
        vocab_size=32000,
        seq_length=4096,
        layernorm_epsilon=1e-5,
        rotary_base=10000,
    )


def llama3_8b() -> GPTModelProvider:
    """meta-llama/Meta-Llama-3-8B."""
    return llama_style_provider(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_query_groups=8,
        vocab_size=128256,
        seq_length=8192,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
    )


def llama31_8b() -> GPTModelProvider:
    """meta-llama/Llama-3.1-8B."""
    return llama_style_provider(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_query_groups=8,
        vocab_size=128256,
        seq_length=131072,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
        rope_scaling_factor=8.0,
        **_LLAMA3_ROPE,
    )


def llama31_70b() -> GPTModelProvider:
    """meta-llama/Llama-3.1-70B."""
    return llama_style_provider(
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_query_groups=8,
        vocab_size=128256,
        seq_length=131072,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
        rope_scaling_factor=8.0,
        **_LLAMA3_ROPE,
    )


def llama32_1b() -> GPTModelProvider:
    """meta-llama/Llama-3.2-1B (tied embeddings)."""
    return llama_style_provider(
        num_layers=16,
        hidden_size=2048,
        ffn_hidden_size=8192,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=64,
        vocab_size=128256,
        seq_length=131072,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
        rope_scaling_factor=32.0,
        share_embeddings_and_output_weights=True,
        **_LLAMA3_ROPE,
    )


def llama32_3b() -> GPTModelProvider:
    """meta-llama/Llama-3.2-3B (tied embeddings)."""
    return llama_style_provider(
        num_layers=28,
        hidden_size=3072,
        ffn_hidden_size=8192,
        num_attention_heads=24,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=128256,
        seq_length=131072,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
        rope_scaling_factor=32.0,
        share_embeddings_and_output_weights=True,
        **_LLAMA3_ROPE,
    )


def llama3_70b() -> GPTModelProvider:
    """meta-llama/Meta-Llama-3-70B."""
    return llama_style_provider(
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_query_groups=8,
        vocab_size=128256,
        seq_length=8192,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
    )


def llama31_405b() -> GPTModelProvider:
    """meta-llama/Llama-3.1-405B."""
    return llama_style_provider(
        num_layers=126,
        hidden_size=16384,
        ffn_hidden_size=53248,
        num_attention_heads=128,
        num_query_groups=8,
        vocab_size=128256,
        seq_length=131072,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
        rope_scaling_factor=8.0,
        **_LLAMA3_ROPE,
    )
