"""GPT-OSS providers with the values of the published Hugging Face configs (openai/gpt-oss-*).

The published checkpoints hold MXFP4 experts (refused by the conversion: convert a bf16 copy); the
presets are the bf16 model they describe.
"""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# What both share: GQA of 64 heads of 64 over 8 groups, hidden 2880 (experts of 2880), 4 experts per
# token renormalised, every linear biased, a sink per head, a 128-token window on every other layer
# (layer 1, 3, ...: 1-based odd), YaRN x32 from 4096 positions, clamped SwiGLU.
_GPT_OSS: dict[str, Any] = dict(
    hidden_size=2880,
    ffn_hidden_size=2880,
    num_attention_heads=64,
    num_query_groups=8,
    kv_channels=64,
    vocab_size=201088,
    seq_length=131072,
    layernorm_epsilon=1e-5,
    rotary_base=150000,
    position_embedding_type="yarn",
    yarn_rotary_scaling_factor=32.0,
    yarn_original_max_position_embeddings=4096,
    yarn_beta_fast=32.0,
    yarn_beta_slow=1.0,
    yarn_correction_range_round_to_int=False,
    add_qkv_bias=True,
    add_bias_linear=True,
    softmax_type="learnable",
    window_size=[127, 0],
    window_attn_skip_freq=2,
    activation_func="quick_gelu",
    activation_func_clamp_value=7.0,
    glu_linear_offset=1.0,
    moe_ffn_hidden_size=2880,
    moe_router_topk=4,
    moe_router_pre_softmax=False,
    moe_router_load_balancing_type="aux_loss",
    moe_aux_loss_coeff=0.9,
    moe_token_dispatcher_type="alltoall",
)


def gpt_oss_20b() -> GPTModelProvider:
    """openai/gpt-oss-20b: 24 layers, 32 experts."""
    return llama_style_provider(**_GPT_OSS, num_layers=24, num_moe_experts=32)


def gpt_oss_120b() -> GPTModelProvider:
    """openai/gpt-oss-120b: 36 layers, 128 experts."""
    return llama_style_provider(**_GPT_OSS, num_layers=36, num_moe_experts=128)
