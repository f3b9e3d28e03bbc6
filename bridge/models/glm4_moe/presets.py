"""GLM-4.5 / GLM-4.6 / GLM-4.5-Air providers with the values of the published Hugging Face configs.

All three: GQA (96 heads, 8 key/value groups, heads of 128), q/k/v biases, RoPE (base 1e6) over half of
each head, RMSNorm eps 1e-5, untied embeddings; sigmoid routing with an expert bias (8 experts per token,
renormalised, one group), one shared expert of the expert size; the first layer(s) dense. The published
multi-token-prediction layer is a training choice the presets leave off (mtp_num_layers=None;
model.mtp_num_layers=1 trains it, docs/conversion.md).
"""

from typing import Any

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider

_GLM: dict[str, Any] = dict(
    num_attention_heads=96,
    num_query_groups=8,
    kv_channels=128,  # head_dim, not hidden_size / heads
    vocab_size=151552,
    layernorm_epsilon=1e-5,
    rotary_base=1000000,
    rotary_percent=0.5,
    add_qkv_bias=True,
    moe_router_topk=8,
    moe_router_score_function="sigmoid",
    moe_router_pre_softmax=False,
    moe_router_enable_expert_bias=True,
    moe_router_dtype="fp32",
    moe_shared_expert_gate=False,
    moe_router_load_balancing_type="seq_aux_loss",
    moe_aux_loss_coeff=0.001,
    moe_token_dispatcher_type="alltoall",
)


def _dense_first(dense: int, layers: int) -> list[int]:
    return [0] * dense + [1] * (layers - dense)  # HF first_k_dense_replace


def _glm45_355b(seq_length: int) -> GPTModelProvider:
    return llama_style_provider(
        **_GLM,
        num_layers=92,
        hidden_size=5120,
        ffn_hidden_size=12288,
        seq_length=seq_length,
        qk_layernorm=True,
        num_moe_experts=160,
        moe_ffn_hidden_size=1536,
        moe_shared_expert_intermediate_size=1536,
        moe_layer_freq=_dense_first(3, 92),
        moe_router_topk_scaling_factor=2.5,
    )


def glm45() -> GPTModelProvider:
    """zai-org/GLM-4.5: 355B (32B active), 92 layers (3 dense), 160 experts, q/k norms, x2.5 scaling."""
    return _glm45_355b(seq_length=131072)


def glm46() -> GPTModelProvider:
    """zai-org/GLM-4.6: GLM-4.5's architecture with a 202752-token context."""
    return _glm45_355b(seq_length=202752)


def glm45_air() -> GPTModelProvider:
    """zai-org/GLM-4.5-Air: 106B (12B active), 46 layers (1 dense), 128 experts, no q/k norms."""
    return llama_style_provider(
        **_GLM,
        num_layers=46,
        hidden_size=4096,
        ffn_hidden_size=10944,
        seq_length=131072,
        num_moe_experts=128,
        moe_ffn_hidden_size=1408,
        moe_shared_expert_intermediate_size=1408,
        moe_layer_freq=_dense_first(1, 46),  # routed weights unscaled (routed_scaling_factor 1.0)
    )
