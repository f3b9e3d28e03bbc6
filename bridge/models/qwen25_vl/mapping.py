"""Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration): Hugging Face <-> Megatron-Core parameter names, as data.

A vision-language family: the language model is Qwen2 (q/k/v biases; M-RoPE positions, which only the
provider fields and the model's position ids carry), so its rows are the qwen2 family's under the
checkpoint's own names (`model.`, `lm_head.`, as transformers saves them); the image side (transformers'
Qwen2.5-VL vision transformer, whose `merger` is the projector) is copied tensor by tensor under
`visual.`, replicated on every tensor-parallel rank.
"""

ARCHITECTURES = ("Qwen2_5_VLForConditionalGeneration",)
HF_MODEL_TYPE = "qwen2_5_vl"
PROVIDER_FIELDS: dict = {}

TEXT_CONFIG_KEY = "text_config"
TEXT_HF_PREFIXES = (("model.", "model."), ("lm_head.", "lm_head."))

MAPPINGS = (("replicated", "vision.visual.{rest}", "visual.{rest}"),)
