"""OLMo 2 providers with the values of the published Hugging Face configs (allenai/OLMo-2-*)."""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What every OLMo 2 shares: MHA, norms after the branches, q/k norms over the whole projections,
# vocabulary 100352, 4096 positions, RMSNorm eps 1e-6, rope_theta 500000, untied output layer.
_OLMO2: dict[str, Any] = dict(
    qk_layernorm=True,
    qk_layernorm_scope="projection",
    layernorm_placement="post",
    vocab_size=100352,
    seq_length=4096,
    layernorm_epsilon=1e-6,
    rotary_base=500000,
)


def olmo2_1b() -> GPTModelProvider:
    """allenai/OLMo-2-0425-1B."""
    return llama_style_provider(
        **_OLMO2,
        num_layers=16,
        hidden_size=2048,
        ffn_hidden_size=8192,
        num_attention_heads=16,
        num_query_groups=16,
    )


def olmo2_7b() -> GPTModelProvider:
    """allenai/OLMo-2-1124-7B."""
    return llama_style_provider(
        **_OLMO2,
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_query_groups=32,
    )


def olmo2_13b() -> GPTModelProvider:
    """allenai/OLMo-2-1124-13B."""
    return llama_style_provider(
        **_OLMO2,
        num_layers=40,
        hidden_size=5120,
        ffn_hidden_size=13824,
        num_attention_heads=40,
        num_query_groups=40,
    )
