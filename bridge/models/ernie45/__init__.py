"""ernie45 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.ernie45.presets import ernie45_0p3b

__all__ = ["ernie45_0p3b"]
