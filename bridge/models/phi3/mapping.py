"""Phi-3 (4k-context variants): the Llama layout with q/k/v packed into one `qkv_proj` and gate/up
packed into one `gate_up_proj`.

`qkv_proj` holds [all q heads; all k heads; all v heads]; Megatron's linear_qkv is grouped per query
group (its q heads, its k head, its v head), so the "qkv_packed" kind cuts one HF tensor into that
layout. `gate_up_proj` holds [gate; up] (transformers chunks it in two); "gated_mlp_packed" gives each
TP rank [its gate rows; its up rows], as linear_fc1 expects. No biases, RMSNorm, SwiGLU.
"""

from bridge.models.llama.mapping import EMBEDDINGS, L, M

ARCHITECTURES = ("Phi3ForCausalLM",)
HF_MODEL_TYPE = "phi3"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}

ATTENTION = (
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.input_layernorm.weight"),
    ("qkv_packed", f"{M}.self_attention.linear_qkv.weight", f"{L}.self_attn.qkv_proj.weight"),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.post_attention_layernorm.weight"),
)

MLP = (
    ("gated_mlp_packed", f"{M}.mlp.linear_fc1.weight", f"{L}.mlp.gate_up_proj.weight"),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mlp.down_proj.weight"),
)

MAPPINGS = EMBEDDINGS + ATTENTION + MLP
