"""OLMoE: Llama attention with OLMo 2's q/k RMSNorms over whole projections (pre-norm placement), and
a MoE block (router `mlp.gate`, experts gate/up/down) in every layer.

q_norm / k_norm normalise all heads of q / k at once (num_heads * head_dim, num_kv_heads * head_dim
weights), TP-sharded by heads like a column-parallel weight (bridge.models.qk_norm).
"""

from bridge.models.llama.mapping import ATTENTION, EMBEDDINGS, L, M

ARCHITECTURES = ("OlmoeForCausalLM",)
HF_MODEL_TYPE = "olmoe"  # config.json "model_type"
PROVIDER_FIELDS: dict = {"qk_layernorm": True, "qk_layernorm_scope": "projection"}

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.mlp.experts.{{expert}}"

QK_NORM = (
    ("column", f"{M}.self_attention.q_layernorm.weight", f"{L}.self_attn.q_norm.weight"),
    ("column", f"{M}.self_attention.k_layernorm.weight", f"{L}.self_attn.k_norm.weight"),
)

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.gate.weight"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.gate_proj.weight", f"{H}.up_proj.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.down_proj.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + QK_NORM + MOE
