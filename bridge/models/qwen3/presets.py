"""Qwen3 (dense) providers with the values of the published Hugging Face configs."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def qwen3_8b() -> GPTModelProvider:
    """Qwen/Qwen3-8B (RMSNorm on queries and keys)."""
    return llama_style_provider(
        num_layers=36,
        hidden_size=4096,
        ffn_hidden_size=12288,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=151936,
        seq_length=40960,
        layernorm_epsilon=1e-6,
        rotary_base=1000000,
        qk_layernorm=True,
    )
