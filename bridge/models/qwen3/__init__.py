"""qwen3 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.qwen3.presets import qwen3_1p7b, qwen3_4b, qwen3_8b, qwen3_14b, qwen3_32b, qwen3_600m

__all__ = ["qwen3_600m", "qwen3_1p7b", "qwen3_4b", "qwen3_8b", "qwen3_14b", "qwen3_32b"]
