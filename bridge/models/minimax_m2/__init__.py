"""minimax_m2 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.minimax_m2.presets import minimax_m2

__all__ = ["minimax_m2"]
