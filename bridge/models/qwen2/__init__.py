"""qwen2 family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.qwen2.presets import qwen25_7b

__all__ = ["qwen25_7b"]
