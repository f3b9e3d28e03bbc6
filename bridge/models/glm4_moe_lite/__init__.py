"""glm4_moe_lite family (GLM-4.7-Flash): provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.glm4_moe_lite.presets import glm47_flash

__all__ = ["glm47_flash"]
