"""exaone4 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.exaone4.presets import exaone4_1p2b, exaone4_32b

__all__ = ["exaone4_1p2b", "exaone4_32b"]
