"""Qwen3.5 text (Qwen3_5ForCausalLM) and Qwen3.5-MoE text (Qwen3_5MoeForCausalLM): Qwen3-Next's layers
(Gated DeltaNet three layers in four, gated softmax attention, zero-centred RMSNorms), with the Gated
DeltaNet input projections stored separately (in_proj_qkv [all q; all k; all v], in_proj_z, in_proj_b,
in_proj_a: kind gdn_in_proj); a dense MLP (text) or routed experts with a gated shared expert (MoE)."""

from bridge.models.llama.mapping import DENSE_MLP, EMBEDDINGS, M
from bridge.models.qwen2_moe.mapping import MOE
from bridge.models.qwen3.mapping import QK_NORM
from bridge.models.qwen3_next.mapping import GATED_ATTENTION, GDN_COMMON, LA, NORMS

ARCHITECTURES = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")
HF_MODEL_TYPE = "qwen3_5_text"  # config.json "model_type"
HF_MODEL_TYPES = {"Qwen3_5ForCausalLM": "qwen3_5_text", "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text"}
PROVIDER_FIELDS = {
    "qk_layernorm": True,
    "layernorm_zero_centered_gamma": True,
    "experimental_attention_variant": "gated_delta_net",
}

GATED_DELTA_NET = (
    (
        "gdn_in_proj",
        f"{M}.self_attention.in_proj.weight",
        (
            f"{LA}.in_proj_qkv.weight",
            f"{LA}.in_proj_z.weight",
            f"{LA}.in_proj_b.weight",
            f"{LA}.in_proj_a.weight",
        ),
    ),
    *GDN_COMMON,
)

MAPPINGS = EMBEDDINGS + NORMS + GATED_ATTENTION + QK_NORM + GATED_DELTA_NET + MOE + DENSE_MLP
