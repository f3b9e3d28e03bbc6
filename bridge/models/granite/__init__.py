"""granite family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.granite.presets import granite33_2b, granite33_8b

__all__ = ["granite33_2b", "granite33_8b"]
