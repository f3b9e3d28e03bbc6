"""Mixtral: Llama attention, a sparse MoE block (router + experts w1=gate, w3=up, w2=down) per layer."""

from bridge.models.llama.mapping import ATTENTION, EMBEDDINGS, L, M

ARCHITECTURES = ("MixtralForCausalLM",)
HF_MODEL_TYPE = "mixtral"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.block_sparse_moe.experts.{{expert}}"

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.block_sparse_moe.gate.weight"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.w1.weight", f"{H}.w3.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.w2.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MOE
