"""deepseek family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.deepseek.presets import deepseek_v2, deepseek_v2_lite, deepseek_v3, kimi_k2, moonlight_16b

__all__ = ["deepseek_v2", "deepseek_v2_lite", "deepseek_v3", "kimi_k2", "moonlight_16b"]
