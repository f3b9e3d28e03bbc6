"""olmo2 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.olmo2.presets import olmo2_1b, olmo2_7b, olmo2_13b

__all__ = ["olmo2_1b", "olmo2_7b", "olmo2_13b"]
