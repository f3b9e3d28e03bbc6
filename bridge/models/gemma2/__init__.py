"""gemma2 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.gemma2.presets import gemma2_2b, gemma2_9b, gemma2_27b

__all__ = ["gemma2_2b", "gemma2_9b", "gemma2_27b"]
