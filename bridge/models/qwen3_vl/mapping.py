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

REFUSED_ARCHITECTURES = {
    "Qwen3VLMoeForConditionalGeneration": (
        "Qwen3-VL-MoE: its language model is Qwen3-MoE with the experts stored fused (3D gate_up_proj / "
        "down_proj tensors) under the vision-language prefixes, which bridge does not convert yet. Fix: "
        "convert the dense Qwen3-VL (Qwen3VLForConditionalGeneration) or Qwen2.5-VL"
    ),
}
