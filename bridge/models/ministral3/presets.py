"""Ministral 3 text presets: the language model of the published Mistral3ForConditionalGeneration
checkpoints (their `text_config`; the vision-language presets are bridge/models/mistral3's).

Every size: 32 query heads in 8 groups of head_dim 128, a 131,072-token vocabulary, RMSNorm epsilon 1e-5,
262,144 positions by YaRN x16 over 16,384 original ones (beta_fast 32, beta_slow 1, mscale = mscale_all_dim
= 1) and Llama 4's query scale with beta 0.1. Sources, per value:

- 8B (34 layers, 4096 wide, FFN 14336, RoPE base 1e6, untied): transformers' Ministral3Config defaults,
  which its docstring names as mistralai/Ministral-3-8B-{Base,Instruct,Reasoning}-2512's.
- 3B (26 layers, 3072 wide, FFN 9216, tied embeddings) and 14B (40 layers, 5120 wide, FFN 16384, RoPE base
  1e9): Megatron-Bridge's Ministral3ModelProvider3B / 14B (its commit 2018704a4, "Ministral 3"; the size
  classes were later folded into config.json reading), whose shared base class also gives the YaRN
  values, epsilon and heads above; the same layers / widths / FFN sizes are the Ministral 3 paper's
  architecture table (arXiv 2601.08584).
- 3B's head_dim 128, RoPE base 1e6, YaRN keys, llama_4_scaling_beta 0.1 and 262,144 positions: its
  text_config as mlx-vlm's ERNIE-Image text encoder copies it (that model's text encoder is Ministral 3 3B).
- 14B's head_dim 128, YaRN x16 over 16,384, RoPE base 1e9 and 262,144 positions: its config.json as a
  public dataset repository's README lists it (Kaggle-Writing-Dataset).
- 14B's llama_4_scaling_beta: no copy of its config.json found states it; 0.1 is the value the 3B's and 8B's
  configs state and transformers' default (the paper applies the same query scale at every size).
"""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def _ministral3(**fields) -> GPTModelProvider:
    """The fields every Ministral 3 size shares (module docstring), overridden by `fields`."""
    shared = dict(
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
    return llama_style_provider(**{**shared, **fields})


def ministral3_3b() -> GPTModelProvider:
    """The language model of mistralai/Ministral-3-3B-{Base,Instruct,Reasoning}-2512 (embeddings tied)."""
    return _ministral3(num_layers=26, hidden_size=3072, ffn_hidden_size=9216,
                       share_embeddings_and_output_weights=True)  # fmt: skip


def ministral3_8b() -> GPTModelProvider:
    """The language model of mistralai/Ministral-3-8B-Base-2512 (transformers' Ministral3Config defaults,
    which its docstring names as that checkpoint's): YaRN x16 over 16384 positions, Llama 4's query
    scale with beta 0.1."""
    return _ministral3(num_layers=34, hidden_size=4096, ffn_hidden_size=14336)


def ministral3_14b() -> GPTModelProvider:
    """The language model of mistralai/Ministral-3-14B-{Base,Instruct,Reasoning}-2512 (RoPE base 1e9)."""
    return _ministral3(num_layers=40, hidden_size=5120, ffn_hidden_size=16384, rotary_base=1_000_000_000)
