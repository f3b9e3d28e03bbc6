"""GLM-4.7-Flash (Glm4MoeLiteForCausalLM): DeepSeek-V3's multi-latent attention and MoE block with
GLM's router, so the deepseek family's rows apply unchanged (bridge.models.deepseek.mapping): q_a_proj /
q_a_layernorm / q_b_proj, kv_a_proj_with_mqa / kv_a_layernorm / kv_b_proj, o_proj; the router with its
e_score_correction_bias (Megatron-Core's `expert_bias`), per-expert gate/up/down projections as the
checkpoint stores them, an ungated shared expert; dense MLPs in the layers mlp_layer_types calls "dense".
"""

from bridge.models.deepseek import mapping as deepseek
from bridge.models.deepseek.mapping import ATTENTION, DSA_REFUSAL, MOE
from bridge.models.llama.mapping import DENSE_MLP, EMBEDDINGS

ARCHITECTURES = ("Glm4MoeLiteForCausalLM",)
HF_MODEL_TYPE = "glm4_moe_lite"  # config.json "model_type"
PROVIDER_FIELDS = {"multi_latent_attention": True, "qk_layernorm": True}

# Multi-token prediction: DeepSeek-V3's MTP layer layout (num_nextn_predict_layers; the published
# checkpoint's layer 47 of 47 is an MLA + MoE layer, as the last decoder layer), the same rows.
MTP_COPIES = deepseek.MTP_COPIES  # the embedding / output head the MTP layer repeats (read by the registry)
MAPPINGS = EMBEDDINGS + ATTENTION + MOE + DENSE_MLP + deepseek.MTP

# GLM-5 is GLM-4.7-Flash's multi-latent attention with DeepSeek sparse attention's indexer (DeepSeek-V3.2's).
REFUSED_ARCHITECTURES = {
    "GlmMoeDsaForCausalLM": "GLM-5: "
    + DSA_REFUSAL.format(predecessor="GLM-4.7-Flash (Glm4MoeLiteForCausalLM)"),
}
