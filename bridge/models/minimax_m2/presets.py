"""MiniMax-M2 provider with the values of the published Hugging Face config."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def minimax_m2() -> GPTModelProvider:
    """MiniMaxAI/MiniMax-M2: 230B (10B active), 62 layers, 256 experts of 1536, 8 per token (sigmoid +
    expert bias, renormalised), q/k norms over whole projections, RoPE over 64 of 128 head dims."""
    return llama_style_provider(
        num_layers=62,
        hidden_size=3072,
        ffn_hidden_size=1536,  # HF intermediate_size: the expert size (every layer is an MoE layer)
        num_attention_heads=48,
        num_query_groups=8,
        kv_channels=128,  # head_dim, not hidden_size / heads
        vocab_size=200064,
        seq_length=196608,
        layernorm_epsilon=1e-6,
        rotary_base=5000000,
        rotary_percent=0.5,  # rotary_dim 64
        qk_layernorm=True,
        qk_layernorm_scope="projection",
        num_moe_experts=256,
        moe_router_topk=8,
        moe_ffn_hidden_size=1536,
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_dtype="fp32",
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=0.001,
        moe_token_dispatcher_type="alltoall",
    )
