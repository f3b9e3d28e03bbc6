"""ERNIE 4.5 (dense) providers with the values of the published Hugging Face config (baidu/ERNIE-4.5-*)."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def ernie45_0p3b() -> GPTModelProvider:
    """baidu/ERNIE-4.5-0.3B-PT: GQA (2 key/value heads) with heads of 128, interleaved RoPE, tied embeddings."""
    return llama_style_provider(
        num_layers=18,
        hidden_size=1024,
        ffn_hidden_size=3072,
        num_attention_heads=16,
        num_query_groups=2,
        kv_channels=128,
        vocab_size=103424,
        seq_length=131072,
        layernorm_epsilon=1e-5,
        rotary_base=500000,
        rotary_interleaved=True,
        share_embeddings_and_output_weights=True,
    )
