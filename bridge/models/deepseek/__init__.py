"""deepseek family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.deepseek.presets import deepseek_v2, deepseek_v2_lite, deepseek_v3, kimi_k2, moonlight_16b

__all__ = ["deepseek_v2", "deepseek_v2_lite", "deepseek_v3", "kimi_k2", "moonlight_16b"]
