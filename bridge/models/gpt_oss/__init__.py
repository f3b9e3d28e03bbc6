"""gpt_oss family: provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.gpt_oss.presets import gpt_oss_20b, gpt_oss_120b

__all__ = ["gpt_oss_20b", "gpt_oss_120b"]
