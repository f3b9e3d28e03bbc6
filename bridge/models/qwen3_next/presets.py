"""Qwen3-Next providers with the values of the published Hugging Face configs."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def qwen3_next_80b_a3b() -> GPTModelProvider:
    """Qwen/Qwen3-Next-80B-A3B-Instruct (and -Thinking): 48 layers, three Gated DeltaNet layers then one
    gated softmax-attention layer; 512 experts, 10 per token, and a gated shared expert in every layer."""
    return llama_style_provider(
        num_layers=48,
        hidden_size=2048,
        ffn_hidden_size=5120,  # HF intermediate_size; unused while every layer is an MoE layer
        num_attention_heads=16,
        num_query_groups=2,
        kv_channels=256,
        vocab_size=151936,
        seq_length=262144,
        layernorm_epsilon=1e-6,
        rotary_base=10000000,
        rotary_percent=0.25,
        qk_layernorm=True,
        layernorm_zero_centered_gamma=True,
        attention_output_gate=True,
        experimental_attention_variant="gated_delta_net",
        linear_attention_freq=4,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        num_moe_experts=512,
        moe_router_topk=10,
        moe_ffn_hidden_size=512,
        moe_shared_expert_intermediate_size=512,
        moe_shared_expert_gate=True,
        # norm_topk_prob=True: softmax over the selected experts only.
        moe_router_pre_softmax=False,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=0.001,
        moe_token_dispatcher_type="alltoall",
    )
