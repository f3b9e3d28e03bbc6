"""starcoder2 family: provider presets; mapping.py and hf_config.py beside them."""

from bridge.models.starcoder2.presets import starcoder2_3b, starcoder2_7b, starcoder2_15b

__all__ = ["starcoder2_3b", "starcoder2_7b", "starcoder2_15b"]
