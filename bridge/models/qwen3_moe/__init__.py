"""qwen3_moe family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.qwen3_moe.presets import qwen3_30b_a3b, qwen3_235b_a22b

__all__ = ["qwen3_30b_a3b", "qwen3_235b_a22b"]
