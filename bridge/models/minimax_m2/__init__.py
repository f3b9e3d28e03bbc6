"""minimax_m2 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.minimax_m2.presets import minimax_m2

__all__ = ["minimax_m2"]
