"""gemma3 family (text): provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.gemma3.presets import gemma3_1b, gemma3_4b, gemma3_12b, gemma3_27b

__all__ = ["gemma3_1b", "gemma3_4b", "gemma3_12b", "gemma3_27b"]
