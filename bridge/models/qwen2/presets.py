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


def _qwen2(**fields) -> GPTModelProvider:
    """Qwen2 / Qwen2.5 share bias on q/k/v, RMSNorm eps 1e-6 and RoPE base 1e6."""
    return llama_style_provider(
        **{"layernorm_epsilon": 1e-6, "rotary_base": 1000000, "add_qkv_bias": True, **fields}
    )


def qwen2_500m() -> GPTModelProvider:
    """Qwen/Qwen2-0.5B (tied embeddings)."""
    return _qwen2(
        num_layers=24, hidden_size=896, ffn_hidden_size=4864, num_attention_heads=14, num_query_groups=2,
        vocab_size=151936, seq_length=131072, share_embeddings_and_output_weights=True,
    )  # fmt: skip


def qwen2_1p5b() -> GPTModelProvider:
    """Qwen/Qwen2-1.5B (tied embeddings)."""
    return _qwen2(
        num_layers=28, hidden_size=1536, ffn_hidden_size=8960, num_attention_heads=12, num_query_groups=2,
        vocab_size=151936, seq_length=131072, share_embeddings_and_output_weights=True,
    )  # fmt: skip


def qwen2_7b() -> GPTModelProvider:
    """Qwen/Qwen2-7B."""
    return _qwen2(
        num_layers=28, hidden_size=3584, ffn_hidden_size=18944, num_attention_heads=28, num_query_groups=4,
        vocab_size=152064, seq_length=131072,
    )  # fmt: skip


def qwen2_72b() -> GPTModelProvider:
    """Qwen/Qwen2-72B."""
    return _qwen2(
        num_layers=80, hidden_size=8192, ffn_hidden_size=29568, num_attention_heads=64, num_query_groups=8,
        vocab_size=152064, seq_length=32768, layernorm_epsilon=1e-5,
    )  # fmt: skip


def qwen25_500m() -> GPTModelProvider:
    """Qwen/Qwen2.5-0.5B (tied embeddings)."""
    return _qwen2(
        num_layers=24, hidden_size=896, ffn_hidden_size=4864, num_attention_heads=14, num_query_groups=2,
        vocab_size=151936, seq_length=32768, share_embeddings_and_output_weights=True,
    )  # fmt: skip


def qwen25_1p5b() -> GPTModelProvider:
    """Qwen/Qwen2.5-1.5B (tied embeddings)."""
    return _qwen2(
        num_layers=28, hidden_size=1536, ffn_hidden_size=8960, num_attention_heads=12, num_query_groups=2,
        vocab_size=151936, seq_length=131072, share_embeddings_and_output_weights=True,
    )  # fmt: skip


def qwen25_14b() -> GPTModelProvider:
    """Qwen/Qwen2.5-14B."""
    return _qwen2(
        num_layers=48, hidden_size=5120, ffn_hidden_size=13824, num_attention_heads=40, num_query_groups=8,
        vocab_size=152064, seq_length=131072, layernorm_epsilon=1e-5,
    )  # fmt: skip


def qwen25_32b() -> GPTModelProvider:
    """Qwen/Qwen2.5-32B."""
    return _qwen2(
        num_layers=64, hidden_size=5120, ffn_hidden_size=27648, num_attention_heads=40, num_query_groups=8,
        vocab_size=152064, seq_length=131072, layernorm_epsilon=1e-5,
    )  # fmt: skip


def qwen25_72b() -> GPTModelProvider:
    """Qwen/Qwen2.5-72B."""
    return _qwen2(
        num_layers=80, hidden_size=8192, ffn_hidden_size=29568, num_attention_heads=64, num_query_groups=8,
        vocab_size=152064, seq_length=131072, layernorm_epsilon=1e-5,
    )  # fmt: skip
