"""ERNIE 4.5 MoE providers with the values of the published Hugging Face configs.

Both: GQA heads of 128, RoPE (base 500000) over interleaved pairs, RMSNorm eps 1e-5, no biases, 64
experts routed by softmax probability + expert bias (bridge's softmax-score router), the first layer(s)
dense. The multi-token-prediction weights are not part of the model (transformers ignores them).
"""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

_ERNIE: dict[str, Any] = dict(
    kv_channels=128,
    vocab_size=103424,
    seq_length=131072,
    layernorm_epsilon=1e-5,
    rotary_base=500000,
    rotary_interleaved=True,
    num_moe_experts=64,
    moe_router_score_function="sigmoid",
    moe_router_softmax_scores=True,  # softmax probabilities + expert bias (bridge.models.softmax_score_router)
    moe_router_pre_softmax=False,
    moe_router_enable_expert_bias=True,
    moe_router_dtype="fp32",
    moe_shared_expert_gate=False,
    moe_router_load_balancing_type="aux_loss",
    moe_aux_loss_coeff=0.001,
    moe_token_dispatcher_type="alltoall",
)


def _dense_first(dense: int, layers: int) -> list[int]:
    return [0] * dense + [1] * (layers - dense)  # HF moe_layer_start_index, interval 1


def ernie45_21b_a3b() -> GPTModelProvider:
    """baidu/ERNIE-4.5-21B-A3B-PT: 28 layers (1 dense), 6 of 64 experts of 1536 per token, 2 shared experts,
    20 heads / 4 key-value groups, tied embeddings."""
    return llama_style_provider(
        **_ERNIE,
        num_layers=28,
        hidden_size=2560,
        ffn_hidden_size=12288,
        num_attention_heads=20,
        num_query_groups=4,
        share_embeddings_and_output_weights=True,
        moe_router_topk=6,
        moe_ffn_hidden_size=1536,
        moe_shared_expert_intermediate_size=2 * 1536,
        moe_layer_freq=_dense_first(1, 28),
    )


def ernie45_300b_a47b() -> GPTModelProvider:
    """baidu/ERNIE-4.5-300B-A47B-PT: 54 layers (3 dense), 8 of 64 experts of 3584 per token, no shared
    expert, 64 heads / 8 key-value groups."""
    return llama_style_provider(
        **_ERNIE,
        num_layers=54,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_query_groups=8,
        share_embeddings_and_output_weights=False,
        moe_router_topk=8,
        moe_ffn_hidden_size=3584,
        moe_layer_freq=_dense_first(3, 54),
    )
