"""gemma3 family (text): provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.gemma3.presets import gemma3_1b, gemma3_4b, gemma3_12b, gemma3_27b

__all__ = ["gemma3_1b", "gemma3_4b", "gemma3_12b", "gemma3_27b"]
