"""Qwen2 / Qwen2.5 providers with the values of the published Hugging Face configs."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def qwen25_7b() -> GPTModelProvider:
    """Qwen/Qwen2.5-7B (bias on the q/k/v projections)."""
    return llama_style_provider(
        num_layers=28,
        hidden_size=3584,
        ffn_hidden_size=18944,
        num_attention_heads=28,
        num_query_groups=4,
        vocab_size=152064,
        seq_length=131072,
        layernorm_epsilon=1e-6,
        rotary_base=1000000,
        add_qkv_bias=True,
    )
