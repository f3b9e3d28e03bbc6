"""qwen3 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.qwen3.presets import qwen3_1p7b, qwen3_4b, qwen3_8b, qwen3_14b, qwen3_32b, qwen3_600m

__all__ = ["qwen3_600m", "qwen3_1p7b", "qwen3_4b", "qwen3_8b", "qwen3_14b", "qwen3_32b"]
