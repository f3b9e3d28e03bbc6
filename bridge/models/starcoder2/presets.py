"""StarCoder2 providers with the values of the published Hugging Face configs (bigcode/starcoder2-*)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider

# What every StarCoder2 shares: pre-norm LayerNorm with biases, biases on every linear, a tanh-GELU
# MLP without gate, RoPE, a 4096-key sliding window on every layer, heads of 128, 49152 tokens,
# 16384 positions, eps 1e-5, tied output layer.
_STARCODER2: dict[str, Any] = dict(
    normalization="LayerNorm",
    activation_func="gelu_tanh",
    gated_linear_unit=False,
    add_bias_linear=True,
    add_qkv_bias=True,
    position_embedding_type="rope",
    window_size=[4095, 0],
    share_embeddings_and_output_weights=True,
    vocab_size=49152,
    seq_length=16384,
    layernorm_epsilon=1e-5,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    make_vocab_size_divisible_by=128,
)


def starcoder2_3b() -> GPTModelProvider:
    """bigcode/starcoder2-3b (rope_theta as published: 999999.4420358813)."""
    return GPTModelProvider(
        **_STARCODER2,
        num_layers=30,
        hidden_size=3072,
        ffn_hidden_size=12288,
        num_attention_heads=24,
        num_query_groups=2,
        rotary_base=999999.4420358813,
        init_method_std=0.018042,
    )


def starcoder2_7b() -> GPTModelProvider:
    """bigcode/starcoder2-7b."""
    return GPTModelProvider(
        **_STARCODER2,
        num_layers=32,
        hidden_size=4608,
        ffn_hidden_size=18432,
        num_attention_heads=36,
        num_query_groups=4,
        rotary_base=1000000,
        init_method_std=0.018042,
    )


def starcoder2_15b() -> GPTModelProvider:
    """bigcode/starcoder2-15b."""
    return GPTModelProvider(
        **_STARCODER2,
        num_layers=40,
        hidden_size=6144,
        ffn_hidden_size=24576,
        num_attention_heads=48,
        num_query_groups=4,
        rotary_base=100000,
        init_method_std=0.01275,
    )
