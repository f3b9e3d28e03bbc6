"""Qwen1.5-MoE / Qwen2-MoE providers with the values of the published Hugging Face configs."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

# Both published configs: softmax over all experts, top-k without renormalisation (norm_topk_prob
# false), aux-loss coefficient 0.001, every layer sparse, q/k/v biases, a gated shared expert.
_QWEN2_MOE = dict(
    add_qkv_bias=True,
    layernorm_epsilon=1e-6,
    rotary_base=1000000,
    moe_router_pre_softmax=True,
    moe_router_load_balancing_type="aux_loss",
    moe_aux_loss_coeff=0.001,
    moe_token_dispatcher_type="alltoall",
    moe_shared_expert_gate=True,
)


def qwen15_moe_a27b() -> GPTModelProvider:
    """Qwen/Qwen1.5-MoE-A2.7B: 60 experts, 4 per token, shared expert of 5632."""
    return llama_style_provider(
        num_layers=24,
        hidden_size=2048,
        ffn_hidden_size=5632,  # HF intermediate_size; unused while every layer is an MoE layer
        num_attention_heads=16,
        num_query_groups=16,
        vocab_size=151936,
        seq_length=8192,
        num_moe_experts=60,
        moe_router_topk=4,
        moe_ffn_hidden_size=1408,
        moe_shared_expert_intermediate_size=5632,
        **_QWEN2_MOE,
    )


def qwen2_57b_a14b() -> GPTModelProvider:
    """Qwen/Qwen2-57B-A14B: 64 experts, 8 per token, shared expert of 20480, 4 key/value heads."""
    return llama_style_provider(
        num_layers=28,
        hidden_size=3584,
        ffn_hidden_size=18944,
        num_attention_heads=28,
        num_query_groups=4,
        vocab_size=151936,
        seq_length=131072,
        num_moe_experts=64,
        moe_router_topk=8,
        moe_ffn_hidden_size=2560,
        moe_shared_expert_intermediate_size=20480,
        **_QWEN2_MOE,
    )
