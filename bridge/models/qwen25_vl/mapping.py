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


_QWEN3_VL = (
    "{name}: its language model turns M-RoPE with the temporal / height / width axes interleaved over the "
    "frequencies (`mrope_interleaved`: frequency i follows axis i mod 3), and DeepStack adds visual features of "
    "intermediate vision layers (`deepstack_visual_indexes`) to the hidden states of the first decoder layers; "
    "megatron-core 0.16.1 and 0.19.2's MultimodalRotaryEmbedding gives each axis one contiguous section of "
    "frequencies (`mrope_section`) and GPTModel has no per-layer input beside the hidden states, so it does not "
    "convert. Fix: none in bridge for these releases; Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration) converts"
)
REFUSED_ARCHITECTURES = {
    "Qwen3VLForConditionalGeneration": _QWEN3_VL.format(name="Qwen3-VL"),
    "Qwen3VLMoeForConditionalGeneration": _QWEN3_VL.format(name="Qwen3-VL-MoE"),
}
