"""qwen3_next family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.qwen3_next.presets import qwen3_next_80b_a3b

__all__ = ["qwen3_next_80b_a3b"]
