"""llava family (a vision-language family): provider presets; mapping.py its Hugging Face mapping table
(the image side's rows; the language model's come from its text family), hf_config.py its config.json
rules, vision.py its image side (transformers' vision tower and projector)."""

from bridge.models.llava.presets import llava15_7b, llava15_13b

__all__ = ["llava15_7b", "llava15_13b"]
