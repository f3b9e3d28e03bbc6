"""mixtral family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.mixtral.presets import mixtral_8x7b

__all__ = ["mixtral_8x7b"]
