"""olmo3 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.olmo3.presets import olmo3_7b, olmo3_32b

__all__ = ["olmo3_7b", "olmo3_32b"]
