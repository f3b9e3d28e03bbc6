"""GLM-4.5 / 4.6 / Air: Llama attention with optional q/k/v biases and per-head q/k norms; a MoE block
(sigmoid router with a score-correction bias, routed experts, an ungated shared expert) per layer past
the first_k_dense_replace dense ones.

e_score_correction_bias is Megatron-Core's router `expert_bias` buffer (moe_router_enable_expert_bias).
"""

from bridge.models.deepseek.mapping import MTP, MTP_COPIES  # noqa: F401 (MTP_COPIES: read by the registry)
from bridge.models.llama.mapping import ATTENTION, DENSE_MLP, EMBEDDINGS, L, M
from bridge.models.qwen2.mapping import QKV_BIAS
from bridge.models.qwen3.mapping import QK_NORM

ARCHITECTURES = ("Glm4MoeForCausalLM",)
HF_MODEL_TYPE = "glm4_moe"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}  # biases and q/k norms are config switches (hf_config.provider_fields)

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.mlp.experts.{{expert}}"
S = f"{M}.mlp.shared_experts"

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.gate.weight"),
    ("replicated", f"{M}.mlp.router.expert_bias", f"{L}.mlp.gate.e_score_correction_bias"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.gate_proj.weight", f"{H}.up_proj.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.down_proj.weight"),
    (
        "gated_mlp",
        f"{S}.linear_fc1.weight",
        (f"{L}.mlp.shared_experts.gate_proj.weight", f"{L}.mlp.shared_experts.up_proj.weight"),
    ),
    ("row", f"{S}.linear_fc2.weight", f"{L}.mlp.shared_experts.down_proj.weight"),
)

# Multi-token prediction: DeepSeek-V3's MTP layer layout (num_nextn_predict_layers), the same rows.
MAPPINGS = EMBEDDINGS + ATTENTION + QKV_BIAS + QK_NORM + MOE + DENSE_MLP + MTP
