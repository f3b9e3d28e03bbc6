"""granite family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.granite.presets import granite33_2b, granite33_8b

__all__ = ["granite33_2b", "granite33_8b"]
