"""DeepSeek-V2 / V2-Lite / V3: multi-latent attention, routed + shared experts, first layers dense.

Megatron-Core's MLASelfAttention (local spec) holds the attention as:
- linear_q_proj (q_lora_rank None, V2-Lite: HF q_proj) or linear_q_down_proj + q_layernorm +
  linear_q_up_proj (HF q_a_proj, q_a_layernorm, q_b_proj);
- linear_kv_down_proj (HF kv_a_proj_with_mqa: [kv_lora_rank + qk_rope_head_dim, hidden]), kv_layernorm
  (kv_a_layernorm), linear_kv_up_proj (kv_b_proj: per head [qk_nope_head_dim + v_head_dim] rows);
- linear_proj (o_proj).
The up projections are split by heads over TP (column); the local spec's down projections are
ColumnParallelLinear too (each rank computes a slice and MLA all-gathers it), so they are "column" rows.
The RoPE slice keeps HF's interleaved pair layout: Megatron-Core's MLA de-interleaves q_pe / k_pe
before rotating, as transformers' DeepSeek code does, so the weights copy over unchanged.

The MoE block is experts(x) + shared_experts(x) (no shared-expert gate). DeepSeek-V3's
e_score_correction_bias is Megatron-Core's router `expert_bias` buffer (moe_router_enable_expert_bias).
"""

from bridge.models.llama.mapping import DENSE_MLP, EMBEDDINGS, L, M

ARCHITECTURES = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
# config.json "model_type" of each architecture (the family converts two).
HF_MODEL_TYPES = {"DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3"}
HF_MODEL_TYPE = "deepseek_v3"
PROVIDER_FIELDS = {"multi_latent_attention": True, "qk_layernorm": True}

A = f"{M}.self_attention"
H = f"{L}.self_attn"

ATTENTION = (
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.input_layernorm.weight"),
    ("column", f"{A}.linear_q_proj.weight", f"{H}.q_proj.weight"),
    ("column", f"{A}.linear_q_down_proj.weight", f"{H}.q_a_proj.weight"),
    ("replicated", f"{A}.q_layernorm.weight", f"{H}.q_a_layernorm.weight"),
    ("column", f"{A}.linear_q_up_proj.weight", f"{H}.q_b_proj.weight"),
    ("column", f"{A}.linear_kv_down_proj.weight", f"{H}.kv_a_proj_with_mqa.weight"),
    ("replicated", f"{A}.kv_layernorm.weight", f"{H}.kv_a_layernorm.weight"),
    ("column", f"{A}.linear_kv_up_proj.weight", f"{H}.kv_b_proj.weight"),
    ("row", f"{A}.linear_proj.weight", f"{H}.o_proj.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.post_attention_layernorm.weight"),
)

E = f"{M}.mlp.experts.local_experts.{{expert}}"
X = f"{L}.mlp.experts.{{expert}}"
S = f"{M}.mlp.shared_experts"

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.gate.weight"),
    ("replicated", f"{M}.mlp.router.expert_bias", f"{L}.mlp.gate.e_score_correction_bias"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{X}.gate_proj.weight", f"{X}.up_proj.weight")),
    ("row", f"{E}.linear_fc2.weight", f"{X}.down_proj.weight"),
    (
        "gated_mlp",
        f"{S}.linear_fc1.weight",
        (f"{L}.mlp.shared_experts.gate_proj.weight", f"{L}.mlp.shared_experts.up_proj.weight"),
    ),
    ("row", f"{S}.linear_fc2.weight", f"{L}.mlp.shared_experts.down_proj.weight"),
)

# Multi-token prediction (Megatron-Core's MTP block): depth k is the checkpoint's layer num_layers + k, its
# transformer layer a decoder layer of that number (bridge.conversion.model_params.canonical_name), plus
# the norms and projection below (Megatron-Bridge's names). eh_proj takes [enorm(embedding); hnorm(hidden)]
# on both sides. The embedding and output head the published checkpoints repeat in each MTP layer are the
# model's own (Megatron-Core shares them): checked equal on import, written from them on export.
T = "mtp.layers.{layer}"
MTP = (
    ("replicated", f"{T}.enorm.weight", f"{L}.enorm.weight"),
    ("replicated", f"{T}.hnorm.weight", f"{L}.hnorm.weight"),
    ("column", f"{T}.eh_proj.weight", f"{L}.eh_proj.weight"),
    ("replicated", f"{T}.final_layernorm.weight", f"{L}.shared_head.norm.weight"),
)
MTP_COPIES = (
    (f"{L}.embed_tokens.weight", "embedding.word_embeddings.weight"),
    (f"{L}.shared_head.head.weight", "output_layer.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MOE + DENSE_MLP + MTP

# DeepSeek sparse attention (DSA): Megatron-Core's experimental_attention_variant="dsa" (0.16.1 and
# 0.19.2, experimental_attention_variant/dsa.py) rotates the indexer's q/k with fast_hadamard_transform's
# CUDA kernel (not installable without CUDA) and asserts bf16 input, so neither the CPU path nor an fp32
# comparison with transformers' class can compute it exactly; refused rather than approximated.
DSA_REFUSAL = (
    "DeepSeek sparse attention's indexer (index_topk, index_n_heads, index_head_dim) is Megatron-Core's "
    "experimental_attention_variant='dsa', which in megatron-core 0.16.1 and 0.19.2 applies its Hadamard "
    "rotation through fast_hadamard_transform's CUDA kernel and accepts bf16 only: bridge cannot compute it "
    "exactly (no CPU path, no fp32 parity with transformers), so it does not convert. Fix: none in bridge "
    "for now; its dense-attention predecessor {predecessor} converts"
)
REFUSED_ARCHITECTURES = {
    "DeepseekV32ForCausalLM": "DeepSeek-V3.2: "
    + DSA_REFUSAL.format(predecessor="DeepSeek-V3 (DeepseekV3ForCausalLM)"),
    "DeepseekV4ForCausalLM": (
        "DeepSeek-V4: its manifold hyper-connections (hc_mult residual streams, DeepseekV4HyperConnection), "
        "compressed sparse attention (CSA / HCA compressors with their indexer) and hash-routed MoE layers "
        "have no Megatron-Core module in megatron-core 0.16.1 or 0.19.2 (GPTModel keeps one residual stream, "
        "MultiLatentAttention no KV compression, TopKRouter no hash routing), so it does not convert. Fix: "
        "none in bridge for these releases; DeepSeek-V3 (DeepseekV3ForCausalLM) converts"
    ),
}
