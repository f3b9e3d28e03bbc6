"""Nemotron-H, Nemotron Nano 2 and Nemotron 3 providers with the values of the published checkpoints
(nvidia/Nemotron-H-{4B,8B,47B,56B}-Base-8K, nvidia/NVIDIA-Nemotron-Nano-{9B,12B}-v2,
nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16; the layer patterns and sizes as Megatron-Bridge's recipes hold
them)."""

from typing import Any

from bridge.models.hybrid_provider import MambaModelProvider

# What every Nemotron-H shares: pre-norm RMSNorm blocks of one kind each (Mamba-2, attention without
# position embedding, squared-ReLU MLP without gate), no linear biases, untied output layer, GQA with
# 8 KV heads of 128, Mamba-2 with 8 groups, a conv of 4 and chunks of 128; 131072 tokens, eps 1e-5.
_NEMOTRON_H: dict[str, Any] = dict(
    normalization="RMSNorm",
    activation_func="squared_relu",
    gated_linear_unit=False,
    add_bias_linear=False,
    position_embedding_type="none",
    num_query_groups=8,
    kv_channels=128,
    mamba_num_groups=8,
    mamba_d_conv=4,
    mamba_chunk_size=128,
    vocab_size=131072,
    layernorm_epsilon=1e-5,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    init_method_std=0.02,
    make_vocab_size_divisible_by=128,
    share_embeddings_and_output_weights=False,
)
_H_V1 = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"  # 4B and 8B: 52 layers
_H_47B = "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-"
_H_56B = (
    "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
    "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
)
_NANO_9B = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
_NANO_12B = "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-"
_NANO3_30B = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"  # 52 layers, 23 of them MoE
# Nemotron 3's MoE layers (E): sigmoid routing with a score-correction bias (the router's expert_bias),
# top-k renormalised and scaled, squared-ReLU experts without gate plus one shared expert; Megatron-Bridge's
# router dtype, sequence-level aux loss of 1e-4 and all-to-all dispatcher.
_NEMOTRON_3_MOE: dict[str, Any] = dict(
    moe_router_score_function="sigmoid",
    moe_router_pre_softmax=False,
    moe_router_enable_expert_bias=True,
    moe_router_dtype="fp32",
    moe_router_load_balancing_type="seq_aux_loss",
    moe_aux_loss_coeff=1e-4,
    moe_token_dispatcher_type="alltoall",
    moe_grouped_gemm=False,
    moe_shared_expert_gate=False,
)


def _hybrid(pattern: str, **fields: Any) -> MambaModelProvider:
    return MambaModelProvider(
        **(_NEMOTRON_H | fields), num_layers=len(pattern), hybrid_override_pattern=pattern
    )


def nemotronh_4b() -> MambaModelProvider:
    """nvidia/Nemotron-H-4B-Base-8K."""
    return _hybrid(
        _H_V1, hidden_size=3072, ffn_hidden_size=12288, num_attention_heads=32, mamba_num_heads=112,
        mamba_head_dim=64, mamba_state_dim=128, seq_length=8192,
    )  # fmt: skip


def nemotronh_8b() -> MambaModelProvider:
    """nvidia/Nemotron-H-8B-Base-8K."""
    return _hybrid(
        _H_V1, hidden_size=4096, ffn_hidden_size=21504, num_attention_heads=32, mamba_num_heads=128,
        mamba_head_dim=64, mamba_state_dim=128, seq_length=8192,
    )  # fmt: skip


def nemotronh_47b() -> MambaModelProvider:
    """nvidia/Nemotron-H-47B-Base-8K."""
    return _hybrid(
        _H_47B, hidden_size=8192, ffn_hidden_size=30720, num_attention_heads=64, mamba_num_heads=256,
        mamba_head_dim=64, mamba_state_dim=256, seq_length=8192,
    )  # fmt: skip


def nemotronh_56b() -> MambaModelProvider:
    """nvidia/Nemotron-H-56B-Base-8K."""
    return _hybrid(
        _H_56B, hidden_size=8192, ffn_hidden_size=32768, num_attention_heads=64, mamba_num_heads=256,
        mamba_head_dim=64, mamba_state_dim=256, seq_length=8192,
    )  # fmt: skip


def nemotron_nano_9b_v2() -> MambaModelProvider:
    """nvidia/NVIDIA-Nemotron-Nano-9B-v2."""
    return _hybrid(
        _NANO_9B, hidden_size=4480, ffn_hidden_size=15680, num_attention_heads=40, mamba_num_heads=128,
        mamba_head_dim=80, mamba_state_dim=128, seq_length=131072,
    )  # fmt: skip


def nemotron_nano_12b_v2() -> MambaModelProvider:
    """nvidia/NVIDIA-Nemotron-Nano-12B-v2."""
    return _hybrid(
        _NANO_12B, hidden_size=5120, ffn_hidden_size=20480, num_attention_heads=40, mamba_num_heads=128,
        mamba_head_dim=80, mamba_state_dim=128, seq_length=131072,
    )  # fmt: skip


def nemotron_3_nano_30b_a3b() -> MambaModelProvider:
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: 128 experts of 1856, top-6 scaled by 2.5, a shared
    expert of 3712, GQA with 2 KV heads; no latent projection."""
    return _hybrid(
        _NANO3_30B, **_NEMOTRON_3_MOE, hidden_size=2688, ffn_hidden_size=1856, num_attention_heads=32,
        num_query_groups=2, mamba_num_heads=64, mamba_head_dim=64, mamba_state_dim=128, seq_length=8192,
        num_moe_experts=128, moe_ffn_hidden_size=1856, moe_shared_expert_intermediate_size=3712,
        moe_router_topk=6, moe_router_topk_scaling_factor=2.5,
    )  # fmt: skip
