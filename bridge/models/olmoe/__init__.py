"""olmoe family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.olmoe.presets import olmoe_1b_7b

__all__ = ["olmoe_1b_7b"]
