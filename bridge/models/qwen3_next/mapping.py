"""Qwen3-Next: three Gated DeltaNet layers then one gated softmax-attention layer, every layer a MoE
block with a gated shared expert (Qwen2-MoE's), zero-centred RMSNorms (weight + 1) everywhere but the
Gated DeltaNet output norm.

Softmax layers: q_proj holds per head [q; output gate] (kind qkv_gated), zero-centred q/k norms.
Gated DeltaNet layers (`linear_attn`): in_proj_qkvz / in_proj_ba grouped by key head (kind
gdn_in_proj_grouped), the depthwise conv1d over [q; k; v] channels (gdn_conv), A_log and dt_bias per value
head, the gated output RMSNorm (its scale as is) and out_proj.
"""

from bridge.models.deepseek import mapping as deepseek
from bridge.models.llama.mapping import DENSE_MLP, EMBEDDINGS, L, M
from bridge.models.qwen2_moe.mapping import MOE
from bridge.models.qwen3.mapping import QK_NORM

ARCHITECTURES = ("Qwen3NextForCausalLM",)
HF_MODEL_TYPE = "qwen3_next"  # config.json "model_type"
PROVIDER_FIELDS = {
    "qk_layernorm": True,
    "layernorm_zero_centered_gamma": True,
    "experimental_attention_variant": "gated_delta_net",
}

NORMS = (
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.input_layernorm.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.post_attention_layernorm.weight"),
)

GATED_ATTENTION = (
    (
        "qkv_gated",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.self_attn.q_proj.weight", f"{L}.self_attn.k_proj.weight", f"{L}.self_attn.v_proj.weight"),
    ),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.self_attn.o_proj.weight"),
)

LA = f"{L}.linear_attn"
# Gated DeltaNet rows shared with the families that keep these names (Qwen3.5)
GDN_COMMON = (
    ("gdn_conv", f"{M}.self_attention.conv1d.weight", f"{LA}.conv1d.weight"),
    ("column", f"{M}.self_attention.A_log", f"{LA}.A_log"),
    ("column", f"{M}.self_attention.dt_bias", f"{LA}.dt_bias"),
    ("replicated", f"{M}.self_attention.out_norm.weight", f"{LA}.norm.weight"),
    ("row", f"{M}.self_attention.out_proj.weight", f"{LA}.out_proj.weight"),
)
GATED_DELTA_NET = (
    (
        "gdn_in_proj_grouped",
        f"{M}.self_attention.in_proj.weight",
        (f"{LA}.in_proj_qkvz.weight", f"{LA}.in_proj_ba.weight"),
    ),
    *GDN_COMMON,
)

# Multi-token prediction: the published checkpoints' one MTP layer (mtp.*, as vLLM's Qwen3NextMTP and
# Megatron-Bridge's Qwen3-Next bridge read it) is Megatron-Core's MTP layer: fc(cat[pre_fc_norm_embedding(
# embedding), pre_fc_norm_hidden(hidden)]), a decoder layer of the last layer's kind (softmax attention + MoE;
# Megatron-Core repeats the last layer spec, which the layer_types rule makes a softmax layer), mtp.norm.
# The rows are DeepSeek-V3's layout (model.layers.<num_hidden_layers>.*); MTP_HF_NAMES puts them where
# the checkpoint keeps them (bridge.conversion.model_params.mtp_hf_name). No embedding / head copies.
MTP_HF_NAMES = (
    ("eh_proj.weight", "mtp.fc.weight"),
    ("enorm.weight", "mtp.pre_fc_norm_embedding.weight"),
    ("hnorm.weight", "mtp.pre_fc_norm_hidden.weight"),
    ("shared_head.norm.weight", "mtp.norm.weight"),
    ("", "mtp.layers.{k}."),  # the decoder layer's tensors
)

MAPPINGS = EMBEDDINGS + NORMS + GATED_ATTENTION + QK_NORM + GATED_DELTA_NET + MOE + DENSE_MLP + deepseek.MTP
