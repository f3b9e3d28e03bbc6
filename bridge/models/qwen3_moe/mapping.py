"""Qwen3-MoE: Qwen3 attention (q/k norms) and a MoE block (router `mlp.gate`) per layer; layers left
dense by decoder_sparse_step / mlp_only_layers (Megatron moe_layer_freq 0) hold a plain MLP."""

from bridge.models.llama.mapping import ATTENTION, DENSE_MLP, EMBEDDINGS, L, M
from bridge.models.qwen3.mapping import QK_NORM

ARCHITECTURES = ("Qwen3MoeForCausalLM",)
HF_MODEL_TYPE = "qwen3_moe"  # config.json "model_type"
PROVIDER_FIELDS = {"qk_layernorm": True}

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.mlp.experts.{{expert}}"

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.gate.weight"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.gate_proj.weight", f"{H}.up_proj.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.down_proj.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + QK_NORM + MOE + DENSE_MLP
