"""mixtral family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.mixtral.presets import mixtral_8x7b

__all__ = ["mixtral_8x7b"]
