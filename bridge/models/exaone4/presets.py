"""EXAONE 4 providers with the values of the published Hugging Face configs (LGAI-EXAONE/EXAONE-4.0-*)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What every EXAONE 4 shares: norms after the branches, per-head q/k norms, GQA with 8 key/value
# heads, 102400 tokens, eps 1e-5, rope_theta 1e6 with llama3 scaling (factor 16 over 8192 positions).
_EXAONE4: dict[str, Any] = dict(
    qk_layernorm=True,
    layernorm_placement="post",
    num_query_groups=8,
    vocab_size=102400,
    layernorm_epsilon=1e-5,
    rotary_base=1_000_000,
    rope_scaling=True,
    rope_scaling_factor=16.0,
    rope_scaling_low_freq_factor=1.0,
    rope_scaling_high_freq_factor=4.0,
    rope_scaling_original_max_position_embeddings=8192,
)


def exaone4_1p2b() -> GPTModelProvider:
    """LGAI-EXAONE/EXAONE-4.0-1.2B: global attention with RoPE on every layer, tied embeddings."""
    return llama_style_provider(
        **_EXAONE4,
        num_layers=30,
        hidden_size=2048,
        ffn_hidden_size=4096,
        num_attention_heads=32,
        kv_channels=64,
        seq_length=65536,
        share_embeddings_and_output_weights=True,
    )


def exaone4_32b() -> GPTModelProvider:
    """LGAI-EXAONE/EXAONE-4.0-32B: three 4096-key sliding-window layers with RoPE, then one global
    layer without RoPE ("LLLG")."""
    return llama_style_provider(
        **_EXAONE4,
        num_layers=64,
        hidden_size=5120,
        ffn_hidden_size=27392,
        num_attention_heads=40,
        kv_channels=128,
        seq_length=131072,
        window_size=[4095, 0],
        window_attn_skip_freq=4,
        no_rope_freq=4,
    )
