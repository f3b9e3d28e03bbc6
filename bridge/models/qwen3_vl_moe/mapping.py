"""Qwen3-VL-MoE (Qwen3VLMoeForConditionalGeneration): Hugging Face <-> Megatron-Core parameter names, as data.

Qwen3-VL (bridge.models.qwen3_vl) with a Qwen3-MoE language model: its rows are the qwen3_moe family's
under the checkpoint's names (`model.language_model.`, `lm_head.`), the image side copied under
`model.visual.`. The checkpoint stacks a layer's experts: gate_up_proj [experts, hidden, 2 * ffn] whose
first ffn columns are the gate's and last ffn the up projection's (transformers: `chunk(2)` of x @ W),
down_proj [experts, ffn, hidden] (x @ down_proj). STACKED_EXPERTS cuts them into the per-expert tensors
(nn.Linear layout, transposed) that the qwen3_moe rows name (bridge.conversion.stacked_experts).
"""

ARCHITECTURES = ("Qwen3VLMoeForConditionalGeneration",)
HF_MODEL_TYPE = "qwen3_vl_moe"
PROVIDER_FIELDS: dict = {}

TEXT_CONFIG_KEY = "text_config"
TEXT_HF_PREFIXES = (("model.", "model.language_model."), ("lm_head.", "lm_head."))

MAPPINGS = (("replicated", "vision.visual.{rest}", "model.visual.{rest}"),)

H = "model.language_model.layers.{layer}.mlp.experts.{expert}"  # the per-expert names (moved qwen3_moe rows)
S = "model.language_model.layers.{layer}.mlp.experts"
# (per-expert name, stacked tensor, block, step, transposed, blocks): bridge.conversion.mappings.StackedView
# transformers' model holds gate_up_proj as [experts, 2 * ffn, hidden] and down_proj as [experts, hidden, ffn]
# and its save_pretrained writes them so: a checkpoint holds either layout (bridge.conversion.stacked_experts).
STACKED_TRANSPOSED_IN_MODEL = True
STACKED_EXPERTS = (
    (f"{H}.gate_proj.weight", f"{S}.gate_up_proj", 0, 1, True, 2),
    (f"{H}.up_proj.weight", f"{S}.gate_up_proj", 1, 1, True, 2),
    (f"{H}.down_proj.weight", f"{S}.down_proj", 0, 1, True),
)
