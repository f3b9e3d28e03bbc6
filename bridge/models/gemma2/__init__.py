"""gemma2 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.gemma2.presets import gemma2_2b, gemma2_9b, gemma2_27b

__all__ = ["gemma2_2b", "gemma2_9b", "gemma2_27b"]
