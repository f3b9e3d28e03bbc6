"""phi3 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.phi3.presets import phi3_mini_4k, phi4

__all__ = ["phi3_mini_4k", "phi4"]
