"""qwen2_moe family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.qwen2_moe.presets import qwen2_57b_a14b, qwen15_moe_a27b

__all__ = ["qwen15_moe_a27b", "qwen2_57b_a14b"]
