"""LLaVA (LlavaForConditionalGeneration): Hugging Face <-> Megatron-Core parameter names, as data.

A vision-language family: the language model's rows are its text family's (chosen by the checkpoint's
`text_config.model_type`: Llama / Vicuna, Mistral, Qwen2, ...), with the HF names moved under the
prefixes below; the image side (transformers' modules, held by VisionLanguageModel as `vision`) is
copied tensor by tensor under its own names, replicated on every tensor-parallel rank.
"""

ARCHITECTURES = ("LlavaForConditionalGeneration",)
HF_MODEL_TYPE = "llava"
PROVIDER_FIELDS: dict = {}

# The text model's config and where its tensors sit in the checkpoint (the names transformers saves).
TEXT_CONFIG_KEY = "text_config"
TEXT_HF_PREFIXES = (("model.", "language_model.model."), ("lm_head.", "language_model.lm_head."))

MAPPINGS = (
    ("replicated", "vision.vision_tower.{rest}", "vision_tower.{rest}"),
    ("replicated", "vision.multi_modal_projector.{rest}", "multi_modal_projector.{rest}"),
)
