"""smollm3 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.smollm3.presets import smollm3_3b

__all__ = ["smollm3_3b"]
