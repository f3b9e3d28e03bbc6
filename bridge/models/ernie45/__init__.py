"""ernie45 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.ernie45.presets import ernie45_0p3b

__all__ = ["ernie45_0p3b"]
