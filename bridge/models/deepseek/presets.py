"""DeepSeek-V2-Lite / V2 / V3, Kimi-K2 and Moonlight-16B-A3B (both DeepSeek-V3's architecture) providers
with the values of the published Hugging Face configs.

All but Moonlight (plain RoPE, see its preset): multi-latent attention (kv_lora_rank 512, q/k heads of 128 + 64 rope dims, value heads of
128), YaRN RoPE (factor 40 over 4096 positions, 163840 positions), the first layer(s) dense, then
routed experts plus shared experts (n_shared_experts * moe_intermediate_size, no gate), RMSNorm eps
1e-6, untied embeddings. Multi-token prediction (V3's num_nextn_predict_layers=1) is a training
choice the presets leave off (mtp_num_layers=None; model.mtp_num_layers=1 trains it, docs/conversion.md).

DeepSeek-V2 (236B) routes group-limited (8 groups, 3 chosen) by each group's best expert; Megatron-Core's
group-limited routing ranks a group by the sum of its top (topk // group_topk) = 2 experts. The preset
trains with Megatron-Core's rule; converting the published checkpoint is refused for that reason
(bridge.models.deepseek.hf_config).
"""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

_MLA: dict[str, Any] = dict(
    multi_latent_attention=True,
    qk_layernorm=True,  # q_a_layernorm / kv_a_layernorm
    kv_lora_rank=512,
    qk_head_dim=128,
    qk_pos_emb_head_dim=64,
    v_head_dim=128,
    kv_channels=192,  # qk_head_dim + qk_pos_emb_head_dim
    layernorm_epsilon=1e-6,
    rotary_base=10000,
    seq_length=163840,
    rope_type="yarn",
    rotary_scaling_factor=40.0,
    original_max_position_embeddings=4096,
    beta_fast=32.0,
    beta_slow=1.0,
    moe_shared_expert_gate=False,
    moe_router_dtype="fp32",
    moe_router_load_balancing_type="seq_aux_loss",
    moe_token_dispatcher_type="alltoall",
)

# DeepSeek-V2 / V2-Lite: softmax scores, top-k not renormalised, YaRN mscale = mscale_all_dim = 0.707.
_V2: dict[str, Any] = dict(
    _MLA,
    vocab_size=102400,
    moe_router_score_function="softmax",
    moe_router_pre_softmax=True,
    moe_aux_loss_coeff=0.001,
    mscale=0.707,
    mscale_all_dim=0.707,
)


def _dense_first(dense: int, layers: int) -> list[int]:
    return [0] * dense + [1] * (layers - dense)  # HF first_k_dense_replace


def deepseek_v2_lite() -> GPTModelProvider:
    """deepseek-ai/DeepSeek-V2-Lite: 16B (2.4B active), 27 layers, no query compression, 64 experts, 6
    per token, 2 shared, greedy routing."""
    return llama_style_provider(
        num_layers=27,
        hidden_size=2048,
        ffn_hidden_size=10944,
        num_attention_heads=16,
        num_query_groups=16,
        q_lora_rank=None,
        num_moe_experts=64,
        moe_router_topk=6,
        moe_ffn_hidden_size=1408,
        moe_shared_expert_intermediate_size=2 * 1408,
        moe_layer_freq=_dense_first(1, 27),
        moe_router_topk_scaling_factor=1.0,
        **_V2,
    )


def deepseek_v2() -> GPTModelProvider:
    """deepseek-ai/DeepSeek-V2: 236B (21B active), 60 layers, 160 experts, 6 per token, 2 shared,
    group-limited routing (8 groups, 3 per token; Megatron-Core's group rule, see above), x16 scaling."""
    return llama_style_provider(
        num_layers=60,
        hidden_size=5120,
        ffn_hidden_size=12288,
        num_attention_heads=128,
        num_query_groups=128,
        q_lora_rank=1536,
        num_moe_experts=160,
        moe_router_topk=6,
        moe_ffn_hidden_size=1536,
        moe_shared_expert_intermediate_size=2 * 1536,
        moe_layer_freq=_dense_first(1, 60),
        moe_router_num_groups=8,
        moe_router_group_topk=3,
        moe_router_topk_scaling_factor=16.0,
        **_V2,
    )


def deepseek_v3() -> GPTModelProvider:
    """deepseek-ai/DeepSeek-V3: 671B (37B active), 61 layers (3 dense), 256 experts, 8 per token, 1
    shared; sigmoid scores with an expert bias (noaux_tc), 8 groups of which 4 per token, x2.5 scaling;
    YaRN mscale = mscale_all_dim = 1.0. The MTP layer is not part of the preset."""
    return llama_style_provider(
        **_MLA,
        num_layers=61,
        hidden_size=7168,
        ffn_hidden_size=18432,
        num_attention_heads=128,
        num_query_groups=128,
        vocab_size=129280,
        q_lora_rank=1536,
        num_moe_experts=256,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_layer_freq=_dense_first(3, 61),
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_num_groups=8,
        moe_router_group_topk=4,
        moe_router_topk_scaling_factor=2.5,
        moe_aux_loss_coeff=0.0001,
        mscale=1.0,
        mscale_all_dim=1.0,
    )


def kimi_k2() -> GPTModelProvider:
    """moonshotai/Kimi-K2-Instruct: 1T (32B active), DeepSeek-V3's architecture with 64 heads, 61 layers (the
    first dense), 384 experts, 8 per token, 1 shared; sigmoid scores with an expert bias, no expert groups,
    x2.827 scaling; YaRN factor 32 over 4096 positions (RoPE base 50000, beta_fast 1), 131072 positions."""
    return llama_style_provider(
        **_MLA
        | dict(
            rotary_base=50000,
            rotary_scaling_factor=32.0,
            beta_fast=1.0,
            seq_length=131072,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
        num_layers=61,
        hidden_size=7168,
        ffn_hidden_size=18432,
        num_attention_heads=64,
        num_query_groups=64,
        vocab_size=163840,
        q_lora_rank=1536,
        num_moe_experts=384,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_layer_freq=_dense_first(1, 61),
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_topk_scaling_factor=2.827,
        moe_aux_loss_coeff=0.001,
    )


# Moonlight: plain RoPE (no rope_scaling), so no YaRN fields; Megatron-Core's MLA softmax scale then keeps
# 1 / sqrt(q_head_dim) (mscale_all_dim 0), as the deepseek translation writes for a default RoPE
_YARN_ONLY = ("original_max_position_embeddings", "beta_fast", "beta_slow")
_PLAIN_ROPE_MLA: dict[str, Any] = {k: v for k, v in _MLA.items() if k not in _YARN_ONLY} | dict(
    rope_type="rope", rotary_scaling_factor=1.0, mscale=1.0, mscale_all_dim=0.0
)


def moonlight_16b() -> GPTModelProvider:
    """moonshotai/Moonlight-16B-A3B: 16B (3B active), DeepSeek-V3's architecture at DeepSeek-V2-Lite's size:
    27 layers (the first dense), no query compression, 64 experts, 6 per token, 2 shared; sigmoid scores
    with an expert bias, no expert groups, x2.446 scaling; plain RoPE (base 50000) over 8192 positions,
    RMSNorm eps 1e-5, 163840 tokens. Its eps is not the 1e-6 transformers' q/kv latent norms use, so
    converting the published checkpoint is refused (bridge.models.deepseek.hf_config); the preset trains
    with Megatron-Core's norms at 1e-5, as Megatron-Bridge does."""
    return llama_style_provider(
        **_PLAIN_ROPE_MLA | dict(rotary_base=50000, seq_length=8192, layernorm_epsilon=1e-5),
        num_layers=27,
        hidden_size=2048,
        ffn_hidden_size=11264,
        num_attention_heads=16,
        num_query_groups=16,
        vocab_size=163840,
        q_lora_rank=None,
        num_moe_experts=64,
        moe_router_topk=6,
        moe_ffn_hidden_size=1408,
        moe_shared_expert_intermediate_size=2 * 1408,
        moe_layer_freq=_dense_first(1, 27),
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_topk_scaling_factor=2.446,
        moe_aux_loss_coeff=0.001,
    )
