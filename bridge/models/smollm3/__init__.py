"""smollm3 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.smollm3.presets import smollm3_3b

__all__ = ["smollm3_3b"]
