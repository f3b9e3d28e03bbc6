"""Qwen3-MoE providers with the values of the published Hugging Face configs."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def qwen3_30b_a3b() -> GPTModelProvider:
    """Qwen/Qwen3-30B-A3B: 128 experts, 8 per token, every layer sparse, q/k RMSNorm."""
    return llama_style_provider(
        num_layers=48,
        hidden_size=2048,
        ffn_hidden_size=6144,  # HF intermediate_size; unused while every layer is an MoE layer
        num_attention_heads=32,
        num_query_groups=4,
        kv_channels=128,  # head_dim 128, not hidden_size / heads
        vocab_size=151936,
        seq_length=40960,
        layernorm_epsilon=1e-6,
        rotary_base=1000000,
        qk_layernorm=True,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=768,
        # norm_topk_prob=True: softmax over the selected experts only.
        moe_router_pre_softmax=False,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=0.001,
        moe_token_dispatcher_type="alltoall",
    )


def qwen3_235b_a22b() -> GPTModelProvider:
    """Qwen/Qwen3-235B-A22B: 128 experts, 8 per token, every layer sparse, q/k RMSNorm."""
    model = qwen3_30b_a3b()
    for name, value in dict(
        num_layers=94, hidden_size=4096, ffn_hidden_size=12288, num_attention_heads=64, num_query_groups=4,
        moe_ffn_hidden_size=1536,
    ).items():  # fmt: skip
        setattr(model, name, value)
    return model
