"""EXAONE-MoE (K-EXAONE, ExaoneMoeForCausalLM): pre-norm Llama attention with per-head q/k RMSNorms
(EXAONE 4's attention, OLMoE's norm placement), then a dense MLP or a MoE block (DeepSeek-V3's: sigmoid
router with a score-correction bias, routed experts, an ungated shared expert).

The checkpoint stores the router bias as mlp.e_score_correction_bias (transformers renames it
mlp.gate.e_score_correction_bias in memory) and the experts one by one; the bias is Megatron-Core's
router `expert_bias` buffer (moe_router_enable_expert_bias).
"""

from bridge.models.llama.mapping import ATTENTION, DENSE_MLP, EMBEDDINGS, L, M
from bridge.models.qwen3.mapping import QK_NORM

ARCHITECTURES = ("ExaoneMoeForCausalLM",)
HF_MODEL_TYPE = "exaone_moe"  # config.json "model_type"
PROVIDER_FIELDS: dict = {"qk_layernorm": True}

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.mlp.experts.{{expert}}"
S = f"{M}.mlp.shared_experts"

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.gate.weight"),
    ("replicated", f"{M}.mlp.router.expert_bias", f"{L}.mlp.e_score_correction_bias"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.gate_proj.weight", f"{H}.up_proj.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.down_proj.weight"),
    (
        "gated_mlp",
        f"{S}.linear_fc1.weight",
        (f"{L}.mlp.shared_experts.gate_proj.weight", f"{L}.mlp.shared_experts.up_proj.weight"),
    ),
    ("row", f"{S}.linear_fc2.weight", f"{L}.mlp.shared_experts.down_proj.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + QK_NORM + MOE + DENSE_MLP

# The published checkpoint's multi-token-prediction block (mtp.fc, mtp.pre_fc_norm_embedding / _hidden,
# mtp.norm, mtp.layers.k.*) has a dense MLP (mtp.layers.k.mlp.gate_proj / up_proj / down_proj, as
# Megatron-Bridge's EXAONE-MoE provider builds it with a dense layer spec of its own), while Megatron-Core's
# MTP block (get_gpt_mtp_block_spec) repeats the decoder's last layer spec, a MoE layer here.
UNMAPPED_WHY = (
    (
        r"^mtp\.",
        "EXAONE-MoE's multi-token-prediction layer (mtp.*) has a dense MLP, while Megatron-Core's MTP block "
        "repeats the last (MoE) decoder layer, so bridge does not convert it",
    ),
)
