"""Nemotron-4 architecture providers with the values of the published Hugging Face configs
(nvidia/Minitron-*-Base, pruned and distilled from Nemotron-4 15B)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider

# What every Nemotron-4 shares: pre-norm LayerNorm1P (LayerNorm with bias, scale 1 + w), an MLP of
# squared ReLU without gate, RoPE over half of each head, no linear biases, untied output layer,
# head dimension 128, 256000 tokens, 4096 positions, eps 1e-5, rope_theta 10000.
_NEMOTRON: dict[str, Any] = dict(
    normalization="LayerNorm",
    layernorm_zero_centered_gamma=True,
    activation_func="squared_relu",
    gated_linear_unit=False,
    add_bias_linear=False,
    position_embedding_type="rope",
    rotary_percent=0.5,
    rotary_base=10000,
    kv_channels=128,
    vocab_size=256000,
    seq_length=4096,
    layernorm_epsilon=1e-5,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    init_method_std=0.0134,
    make_vocab_size_divisible_by=128,
)


def minitron_4b() -> GPTModelProvider:
    """nvidia/Minitron-4B-Base (24 heads of 128 over a hidden size of 3072)."""
    return GPTModelProvider(
        **_NEMOTRON,
        num_layers=32,
        hidden_size=3072,
        ffn_hidden_size=9216,
        num_attention_heads=24,
        num_query_groups=8,
    )


def minitron_8b() -> GPTModelProvider:
    """nvidia/Minitron-8B-Base (48 heads of 128 over a hidden size of 4096)."""
    return GPTModelProvider(
        **_NEMOTRON,
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=16384,
        num_attention_heads=48,
        num_query_groups=8,
    )
