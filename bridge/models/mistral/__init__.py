"""mistral family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.mistral.presets import mistral_7b

__all__ = ["mistral_7b"]
