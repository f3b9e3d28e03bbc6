"""olmoe family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.olmoe.presets import olmoe_1b_7b

__all__ = ["olmoe_1b_7b"]
