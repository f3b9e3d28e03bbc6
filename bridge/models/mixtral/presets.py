"""Mixtral providers with the values of the published Hugging Face configs."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def mixtral_8x7b() -> GPTModelProvider:
    """mistralai/Mixtral-8x7B-v0.1: 8 experts, 2 per token."""
    return llama_style_provider(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_query_groups=8,
        vocab_size=32000,
        seq_length=32768,
        layernorm_epsilon=1e-5,
        rotary_base=1000000,
        num_moe_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=14336,
        # Softmax over all experts then renormalised top-2 equals softmax over the top-2 logits.
        moe_router_pre_softmax=False,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=0.02,
        moe_token_dispatcher_type="alltoall",
    )
