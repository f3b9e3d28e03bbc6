"""Qwen3-VL (Qwen3VLForConditionalGeneration): Hugging Face <-> Megatron-Core parameter names, as data.

A vision-language family: the language model is Qwen3 (q/k norms; interleaved M-RoPE, which only the
provider fields and the model's position ids carry), so its rows are the qwen3 family's under the
checkpoint's names (`model.language_model.`, `lm_head.`); the image side (transformers' Qwen3-VL vision
model: patch and position embeddings, blocks, `merger` the projector, `deepstack_merger_list` the
DeepStack projectors) is copied tensor by tensor under `model.visual.`, replicated on every
tensor-parallel rank.
"""

ARCHITECTURES = ("Qwen3VLForConditionalGeneration",)
HF_MODEL_TYPE = "qwen3_vl"
PROVIDER_FIELDS: dict = {}

TEXT_CONFIG_KEY = "text_config"
TEXT_HF_PREFIXES = (("model.", "model.language_model."), ("lm_head.", "lm_head."))

MAPPINGS = (("replicated", "vision.visual.{rest}", "model.visual.{rest}"),)
