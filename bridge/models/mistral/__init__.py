"""mistral family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.mistral.presets import mistral_7b

__all__ = ["mistral_7b"]
