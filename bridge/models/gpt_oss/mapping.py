"""GPT-OSS: attention with q/k/v/o biases and a learnable sink per head, and a MoE block in every layer
whose router and experts have biases.

The sinks are Megatron-Core's softmax_type "learnable" (core_attention.softmax_offset, one per head,
split over TP by heads). The checkpoint stacks a layer's experts: gate_up_proj [experts, hidden,
2 * ffn] with gate and up columns interleaved (gate at even, up at odd), gate_up_proj_bias
[experts, 2 * ffn] alike, down_proj [experts, ffn, hidden] (x @ down_proj), down_proj_bias
[experts, hidden]. STACKED_EXPERTS cuts them into per-expert tensors in nn.Linear layout
(bridge.conversion.stacked_experts), which the rows below map like any other experts.
"""

from bridge.models.llama.mapping import ATTENTION, EMBEDDINGS, L, M
from bridge.models.qwen2.mapping import QKV_BIAS

ARCHITECTURES = ("GptOssForCausalLM",)
HF_MODEL_TYPE = "gpt_oss"  # config.json "model_type"
PROVIDER_FIELDS = {"add_qkv_bias": True, "add_bias_linear": True, "softmax_type": "learnable"}

E = f"{M}.mlp.experts.local_experts.{{expert}}"
H = f"{L}.mlp.experts.{{expert}}"  # per-expert names, cut out of the stacked tensors
S = f"{L}.mlp.experts"

ATTENTION_EXTRAS = (
    ("replicated", f"{M}.self_attention.linear_proj.bias", f"{L}.self_attn.o_proj.bias"),
    ("column", f"{M}.self_attention.core_attention.softmax_offset", f"{L}.self_attn.sinks"),
)

MOE = (
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mlp.router.weight"),
    ("replicated", f"{M}.mlp.router.bias", f"{L}.mlp.router.bias"),
    ("gated_mlp", f"{E}.linear_fc1.weight", (f"{H}.gate_proj.weight", f"{H}.up_proj.weight")),
    ("gated_mlp", f"{E}.linear_fc1.bias", (f"{H}.gate_proj.bias", f"{H}.up_proj.bias")),
    ("row", f"{E}.linear_fc2.weight", f"{H}.down_proj.weight"),
    ("replicated", f"{E}.linear_fc2.bias", f"{H}.down_proj.bias"),
)

# (per-expert name, stacked tensor, first column, column step, transposed): bridge.conversion.mappings.StackedView
STACKED_EXPERTS = (
    (f"{H}.gate_proj.weight", f"{S}.gate_up_proj", 0, 2, True),
    (f"{H}.up_proj.weight", f"{S}.gate_up_proj", 1, 2, True),
    (f"{H}.gate_proj.bias", f"{S}.gate_up_proj_bias", 0, 2, False),
    (f"{H}.up_proj.bias", f"{S}.gate_up_proj_bias", 1, 2, False),
    (f"{H}.down_proj.weight", f"{S}.down_proj", 0, 1, True),
    (f"{H}.down_proj.bias", f"{S}.down_proj_bias", 0, 1, False),
)

MAPPINGS = EMBEDDINGS + ATTENTION + QKV_BIAS + ATTENTION_EXTRAS + MOE

# MiMo-V2-Flash (transformers' MiMoV2FlashForCausalLM) against Megatron-Core 0.16.1 and 0.19.2: like
# GPT-OSS it has attention sinks and sliding-window layers, but not within what one GPTModel can build.
REFUSED_ARCHITECTURES = {
    "MiMoV2FlashForCausalLM": (
        "MiMo-V2-Flash: its value heads are smaller than its query/key heads (v_head_dim 128 against "
        "head_dim 192 by default), its sliding-window layers have twice the key/value heads of its full "
        "layers (with sinks on those layers only) and its values are scaled (attention_value_scale); "
        "megatron-core 0.16.1 and 0.19.2's SelfAttention has one head size for queries, keys and values "
        "(kv_channels) and one num_query_groups for every layer of a GPTModel, so it does not convert. "
        "Fix: none in bridge for these releases"
    ),
}
