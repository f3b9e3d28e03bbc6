"""qwen3 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.qwen3.presets import qwen3_8b

__all__ = ["qwen3_8b"]
