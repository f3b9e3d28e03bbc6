"""K-EXAONE (LGAI-EXAONE/K-EXAONE-236B-A23B) provider with the values of the published checkpoint.

48 layers, hidden 6144, GQA (64 heads of 128 over 8 key/value heads) with per-head q/k norms, norms
before each branch; three 128-key sliding-window layers with RoPE, then one global layer without RoPE
("LLLG"); a 262144-token context, 153600 tokens, untied embeddings. Layer 0 is a dense MLP of 18432, the
others MoE: 128 routed experts of 2048 (8 per token, sigmoid scores with an expert bias, renormalised,
x2.5) and one shared expert of 2048. The published multi-token-prediction block is left out
(mtp_num_layers=None), as transformers builds none. rms_norm_eps is ExaoneMoeConfig's default (1e-5) and
rope_theta 1e6 (Megatron-Bridge's EXAONE-MoE provider).
"""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def k_exaone_236b_a23b() -> GPTModelProvider:
    """LGAI-EXAONE/K-EXAONE-236B-A23B: 236B (23B active)."""
    layers = 48
    return llama_style_provider(
        num_layers=layers,
        hidden_size=6144,
        ffn_hidden_size=18432,
        num_attention_heads=64,
        num_query_groups=8,
        kv_channels=128,
        qk_layernorm=True,
        vocab_size=153600,
        seq_length=262144,
        layernorm_epsilon=1e-5,
        rotary_base=1_000_000,
        window_size=[127, 0],
        window_attn_skip_freq=4,
        no_rope_freq=4,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_shared_expert_gate=False,
        moe_layer_freq=[0] + [1] * (layers - 1),
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_topk_scaling_factor=2.5,
        moe_router_dtype="fp32",
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=0.0,
        moe_token_dispatcher_type="alltoall",
    )
