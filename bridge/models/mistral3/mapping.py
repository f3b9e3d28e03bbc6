"""Mistral 3 / Ministral 3 vision-language (Mistral3ForConditionalGeneration): Hugging Face <-> Megatron-Core
names, as data.

The language model's rows are its text family's (by `text_config.model_type`: mistral for Mistral Small
3.1, ...), with their HF names moved under the checkpoint's prefixes; the image side (transformers' Pixtral
tower and Mistral3MultiModalProjector, held by VisionLanguageModel as `vision`) is copied tensor by tensor
under its own names, replicated on every tensor-parallel rank.
"""

ARCHITECTURES = ("Mistral3ForConditionalGeneration",)
HF_MODEL_TYPE = "mistral3"
PROVIDER_FIELDS: dict = {}

# The text model's config and where its tensors sit in the checkpoint (the names transformers 5 saves).
TEXT_CONFIG_KEY = "text_config"
TEXT_HF_PREFIXES = (("model.", "language_model.model."), ("lm_head.", "language_model.lm_head."))
# The text config keys the image side reads: the projector's RMSNorm takes the language model's epsilon.
VISION_TEXT_KEYS = ("rms_norm_eps",)

MAPPINGS = (
    ("replicated", "vision.vision_tower.{rest}", "vision_tower.{rest}"),
    ("replicated", "vision.multi_modal_projector.{rest}", "multi_modal_projector.{rest}"),
)
