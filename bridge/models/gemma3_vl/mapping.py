"""Gemma 3 vision-language (Gemma3ForConditionalGeneration): Hugging Face <-> Megatron-Core names, as data.

The language model's rows are the gemma3 text family's (Gemma3ForCausalLM: sandwich norms, q/k norms,
two RoPEs, sliding windows), with their HF names moved under the checkpoint's prefixes; the image side
(transformers' SigLIP tower and Gemma3MultiModalProjector, held by VisionLanguageModel as `vision`) is
copied tensor by tensor under its own names, replicated on every tensor-parallel rank.
"""

ARCHITECTURES = ("Gemma3ForConditionalGeneration",)
HF_MODEL_TYPE = "gemma3"
PROVIDER_FIELDS: dict = {}

# The text model's config and where its tensors sit in the checkpoint (the names transformers 5 saves:
# `language_model.model.*`; the output layer is tied to the embeddings and so not saved).
TEXT_CONFIG_KEY = "text_config"
TEXT_HF_PREFIXES = (("model.", "language_model.model."), ("lm_head.", "language_model.lm_head."))

MAPPINGS = (
    ("replicated", "vision.vision_tower.{rest}", "vision_tower.{rest}"),
    ("replicated", "vision.multi_modal_projector.{rest}", "multi_modal_projector.{rest}"),
)
