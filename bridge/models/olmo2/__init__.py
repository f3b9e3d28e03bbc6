"""olmo2 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.olmo2.presets import olmo2_1b, olmo2_7b, olmo2_13b

__all__ = ["olmo2_1b", "olmo2_7b", "olmo2_13b"]
