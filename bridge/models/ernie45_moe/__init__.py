"""ernie45_moe family (ERNIE 4.5 MoE): provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.ernie45_moe.presets import ernie45_21b_a3b, ernie45_300b_a47b

__all__ = ["ernie45_21b_a3b", "ernie45_300b_a47b"]
