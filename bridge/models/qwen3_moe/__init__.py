"""qwen3_moe family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.qwen3_moe.presets import qwen3_30b_a3b, qwen3_235b_a22b

__all__ = ["qwen3_30b_a3b", "qwen3_235b_a22b"]
