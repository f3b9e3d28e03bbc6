"""ERNIE 4.5 MoE: Llama attention and, in its MoE layers, a router (mlp.gate, fp32) with the per-expert
score-correction bias (mlp.moe_statics.e_score_correction_bias, [1, experts]: one expert group; Megatron-
Core's router `expert_bias` [experts]), routed experts and an ungated shared expert (mlp.shared_experts);
the other layers a dense MLP."""

from bridge.models.llama.mapping import ATTENTION, DENSE_MLP, EMBEDDINGS, L, M

ARCHITECTURES = ("Ernie4_5_MoeForCausalLM",)
HF_MODEL_TYPE = "ernie4_5_moe"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.mlp.experts.{{expert}}"
S = f"{M}.mlp.shared_experts"

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.gate.weight"),
    ("replicated_unsqueezed", f"{M}.mlp.router.expert_bias", f"{L}.mlp.moe_statics.e_score_correction_bias"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.gate_proj.weight", f"{H}.up_proj.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.down_proj.weight"),
    (
        "gated_mlp",
        f"{S}.linear_fc1.weight",
        (f"{L}.mlp.shared_experts.gate_proj.weight", f"{L}.mlp.shared_experts.up_proj.weight"),
    ),
    ("row", f"{S}.linear_fc2.weight", f"{L}.mlp.shared_experts.down_proj.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MOE + DENSE_MLP

# The published checkpoints' multi-token-prediction layer (model.mtp_block.k, mtp_emb_norm.k, mtp_hidden_norm.k,
# mtp_linear_proj.k; transformers 5.25's MtpModel reads them) is not what Megatron-Core's MTP block computes:
# transformers builds its decoder layer as layer k of the model (layer 0: a dense MLP of intermediate_size
# wherever moe_layer_start_index > 0, as published) and normalises its output with the main model's
# model.norm, while Megatron-Core's MTP layer repeats the decoder's last layer spec (a MoE layer) and holds
# a final norm of its own (one tensor cannot be two parameters that train apart).
UNMAPPED_WHY = (
    (
        r"^model\.mtp_",
        "ERNIE 4.5's multi-token-prediction layer (model.mtp_*) has a dense MLP where moe_layer_start_index > 0 "
        "and reuses model.norm as its final norm, while Megatron-Core's MTP block repeats the last (MoE) "
        "decoder layer with a final norm of its own, so bridge does not convert it",
    ),
)
