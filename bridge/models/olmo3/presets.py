"""OLMo 3 providers (allenai/Olmo-3-*): OLMo 2's layout with three 4096-key sliding-window layers
before each global one."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

_OLMO3: dict[str, Any] = dict(
    qk_layernorm=True,
    qk_layernorm_scope="projection",
    layernorm_placement="post",
    vocab_size=100278,
    layernorm_epsilon=1e-6,
    rotary_base=500000,
    window_size=[4095, 0],
    window_attn_skip_freq=4,
)
# The published checkpoints are the long-context ones: YaRN (factor 8 over 8192 positions, HF's default
# attention factor 0.1 ln 8 + 1) on the global layers, 65536 positions; the sliding layers keep RoPE.
_LONG_CONTEXT: dict[str, Any] = dict(
    seq_length=65536,
    yarn_rope_factor=8.0,
    yarn_rope_original_max_position_embeddings=8192,
    yarn_rope_beta_fast=32.0,
    yarn_rope_beta_slow=1.0,
    yarn_rope_attention_factor=1.2079441541679836,
    local_rotary_base=500000.0,
)


def olmo3_7b() -> GPTModelProvider:
    """allenai/Olmo-3-1025-7B."""
    return llama_style_provider(
        **_OLMO3,
        **_LONG_CONTEXT,
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_query_groups=32,
    )


def olmo3_32b() -> GPTModelProvider:
    """allenai/Olmo-3-1125-32B."""
    return llama_style_provider(
        **_OLMO3,
        **_LONG_CONTEXT,
        num_layers=64,
        hidden_size=5120,
        ffn_hidden_size=27648,
        num_attention_heads=40,
        num_query_groups=8,
    )
