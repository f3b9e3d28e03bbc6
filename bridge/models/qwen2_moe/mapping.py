"""Qwen1.5-MoE / Qwen2-MoE: Qwen2 attention (q/k/v biases), routed experts and a gated shared expert.

The MoE block's output is experts(x) + sigmoid(shared_expert_gate(x)) * shared_expert(x): Megatron-Core's
SharedExpertMLP with moe_shared_expert_gate holds the gate as `gate_weight` [1, hidden] (replicated over
TP). Layers left dense by decoder_sparse_step / mlp_only_layers (moe_layer_freq 0) are a plain MLP.
"""

from bridge.models.llama.mapping import ATTENTION, DENSE_MLP, EMBEDDINGS, L, M
from bridge.models.qwen2.mapping import QKV_BIAS

ARCHITECTURES = ("Qwen2MoeForCausalLM",)
HF_MODEL_TYPE = "qwen2_moe"  # config.json "model_type"
PROVIDER_FIELDS = {"add_qkv_bias": True}

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.mlp.experts.{{expert}}"
S = f"{M}.mlp.shared_experts"

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.gate.weight"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.gate_proj.weight", f"{H}.up_proj.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.down_proj.weight"),
    (
        "gated_mlp",
        f"{S}.linear_fc1.weight",
        (f"{L}.mlp.shared_expert.gate_proj.weight", f"{L}.mlp.shared_expert.up_proj.weight"),
    ),
    ("row", f"{S}.linear_fc2.weight", f"{L}.mlp.shared_expert.down_proj.weight"),
    ("replicated", f"{S}.gate_weight", f"{L}.mlp.shared_expert_gate.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + QKV_BIAS + MOE + DENSE_MLP
