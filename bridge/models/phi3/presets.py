"""Phi-3 providers with the values of the published Hugging Face configs (4k-context variants).

The 128k-context Phi-3 models and Phi-3.5-mini-instruct use LongRoPE (rope_scaling type "longrope":
per-dimension short/long frequency factors), which the provider does not implement; converting them
is refused (phi3.hf_config.ROPE_TYPE_NOTES) and there is no preset for them.
"""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def phi3_mini_4k() -> GPTModelProvider:
    """microsoft/Phi-3-mini-4k-instruct: MHA (32 heads), sliding window of 2047 keys."""
    return llama_style_provider(
        num_layers=32,
        hidden_size=3072,
        ffn_hidden_size=8192,
        num_attention_heads=32,
        num_query_groups=32,
        vocab_size=32064,
        seq_length=4096,
        layernorm_epsilon=1e-5,
        rotary_base=10000,
        window_size=[2046, 0],  # HF sliding_window 2047 keys including the query's own
    )


def phi4() -> GPTModelProvider:
    """microsoft/phi-4 (a Phi3ForCausalLM): 40 heads over 10 key/value groups, no sliding window."""
    return llama_style_provider(
        num_layers=40,
        hidden_size=5120,
        ffn_hidden_size=17920,
        num_attention_heads=40,
        num_query_groups=10,
        vocab_size=100352,
        seq_length=16384,
        layernorm_epsilon=1e-5,
        rotary_base=250000,
    )
