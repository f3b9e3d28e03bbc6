"""qwen3_5 family (Qwen3.5 text and Qwen3.5-MoE text): provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.qwen3_5.presets import qwen35_27b

__all__ = ["qwen35_27b"]
