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


def _qwen3(**fields) -> GPTModelProvider:
    """Qwen3 dense models share head_dim 128, q/k RMSNorm, eps 1e-6, RoPE base 1e6, 40960 positions."""
    return llama_style_provider(
        **{"kv_channels": 128, "vocab_size": 151936, "seq_length": 40960, "layernorm_epsilon": 1e-6,
           "rotary_base": 1000000, "qk_layernorm": True, **fields}
    )  # fmt: skip


def qwen3_600m() -> GPTModelProvider:
    """Qwen/Qwen3-0.6B (tied embeddings)."""
    return _qwen3(
        num_layers=28, hidden_size=1024, ffn_hidden_size=3072, num_attention_heads=16, num_query_groups=8,
        share_embeddings_and_output_weights=True,
    )  # fmt: skip


def qwen3_1p7b() -> GPTModelProvider:
    """Qwen/Qwen3-1.7B (tied embeddings)."""
    return _qwen3(
        num_layers=28, hidden_size=2048, ffn_hidden_size=6144, num_attention_heads=16, num_query_groups=8,
        share_embeddings_and_output_weights=True,
    )  # fmt: skip


def qwen3_4b() -> GPTModelProvider:
    """Qwen/Qwen3-4B (tied embeddings)."""
    return _qwen3(
        num_layers=36, hidden_size=2560, ffn_hidden_size=9728, num_attention_heads=32, num_query_groups=8,
        share_embeddings_and_output_weights=True,
    )  # fmt: skip


def qwen3_14b() -> GPTModelProvider:
    """Qwen/Qwen3-14B."""
    return _qwen3(
        num_layers=40, hidden_size=5120, ffn_hidden_size=17408, num_attention_heads=40, num_query_groups=8
    )


def qwen3_32b() -> GPTModelProvider:
    """Qwen/Qwen3-32B."""
    return _qwen3(
        num_layers=64, hidden_size=5120, ffn_hidden_size=25600, num_attention_heads=64, num_query_groups=8
    )
