"""phi3 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.phi3.presets import phi3_mini_4k, phi4

__all__ = ["phi3_mini_4k", "phi4"]
