"""OLMoE providers with the values of the published Hugging Face configs (allenai/OLMoE-*)."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def olmoe_1b_7b() -> GPTModelProvider:
    """allenai/OLMoE-1B-7B-0924 (and -0125): 64 experts of 1024, 8 per token, softmax over all experts
    without renormalising the top 8, q/k norms over whole projections, aux-loss coefficient 0.01."""
    return llama_style_provider(
        num_layers=16,
        hidden_size=2048,
        ffn_hidden_size=1024,  # HF intermediate_size: the experts' size (no dense layer)
        num_attention_heads=16,
        num_query_groups=16,
        vocab_size=50304,
        seq_length=4096,
        layernorm_epsilon=1e-5,
        rotary_base=10000,
        qk_layernorm=True,
        qk_layernorm_scope="projection",
        num_moe_experts=64,
        moe_router_topk=8,
        moe_ffn_hidden_size=1024,
        moe_router_pre_softmax=True,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=0.01,
        moe_token_dispatcher_type="alltoall",
    )
