"""olmo3 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.olmo3.presets import olmo3_7b, olmo3_32b

__all__ = ["olmo3_7b", "olmo3_32b"]
