"""Ministral 3 text presets: the language model of the published Mistral3ForConditionalGeneration
checkpoints (their `text_config`; the vision-language presets are bridge/models/mistral3's)."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def ministral3_8b() -> GPTModelProvider:
    """The language model of mistralai/Ministral-3-8B-Base-2512 (transformers' Ministral3Config defaults,
    which its docstring names as that checkpoint's): YaRN x16 over 16384 positions, Llama 4's query
    scale with beta 0.1."""
    return llama_style_provider(
        num_layers=34,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=131072,
        seq_length=262144,
        layernorm_epsilon=1e-5,
        rotary_base=1000000,
        yarn_rope_factor=16.0,
        yarn_rope_original_max_position_embeddings=16384,
        llama4_attn_scale_beta=0.1,
    )
