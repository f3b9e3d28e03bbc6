"""MiniMax-M2: Llama attention with q/k RMSNorms over whole projections (OLMo 2's layout: the norm weights
are sharded by heads over TP, bridge.models.qk_norm) and a Mixtral MoE block (block_sparse_moe: router,
experts w1=gate, w3=up, w2=down) in every layer, with the router's e_score_correction_bias (Megatron-Core's
router `expert_bias` buffer, moe_router_enable_expert_bias)."""

from bridge.models.llama.mapping import ATTENTION, EMBEDDINGS, L, M
from bridge.models.mixtral.mapping import MOE

ARCHITECTURES = ("MiniMaxM2ForCausalLM",)
HF_MODEL_TYPE = "minimax_m2"  # config.json "model_type"
PROVIDER_FIELDS: dict = {"qk_layernorm": True, "qk_layernorm_scope": "projection"}

QK_NORM = (
    ("column", f"{M}.self_attention.q_layernorm.weight", f"{L}.self_attn.q_norm.weight"),
    ("column", f"{M}.self_attention.k_layernorm.weight", f"{L}.self_attn.k_norm.weight"),
)
EXPERT_BIAS = (
    ("replicated", f"{M}.mlp.router.expert_bias", f"{L}.block_sparse_moe.e_score_correction_bias"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + QK_NORM + MOE + EXPERT_BIAS
