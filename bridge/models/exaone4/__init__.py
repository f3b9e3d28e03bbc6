"""exaone4 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.exaone4.presets import exaone4_1p2b, exaone4_32b

__all__ = ["exaone4_1p2b", "exaone4_32b"]
