"""Mistral providers with the values of the published Hugging Face configs."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def mistral_7b() -> GPTModelProvider:
    """mistralai/Mistral-7B-v0.3 (no sliding window, 32768-token vocabulary)."""
    return llama_style_provider(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_query_groups=8,
        vocab_size=32768,
        seq_length=32768,
        layernorm_epsilon=1e-5,
        rotary_base=1000000,
    )
