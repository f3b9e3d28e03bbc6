"""ernie45_moe family (ERNIE 4.5 MoE): provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.ernie45_moe.presets import ernie45_21b_a3b, ernie45_300b_a47b

__all__ = ["ernie45_21b_a3b", "ernie45_300b_a47b"]
