"""gpt_oss family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.gpt_oss.presets import gpt_oss_20b, gpt_oss_120b

__all__ = ["gpt_oss_20b", "gpt_oss_120b"]
