"""SmolLM3 providers with the values of the published Hugging Face config (HuggingFaceTB/SmolLM3-*)."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def smollm3_3b() -> GPTModelProvider:
    """HuggingFaceTB/SmolLM3-3B: Llama-style GQA, tied embeddings, no RoPE on every fourth layer."""
    return llama_style_provider(
        num_layers=36,
        hidden_size=2048,
        ffn_hidden_size=11008,
        num_attention_heads=16,
        num_query_groups=4,
        vocab_size=128256,
        seq_length=65536,
        layernorm_epsilon=1e-6,
        rotary_base=5_000_000,
        share_embeddings_and_output_weights=True,
        no_rope_freq=4,
    )
