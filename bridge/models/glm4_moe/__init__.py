"""glm4_moe family (GLM-4.5 / 4.6 / Air): provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.glm4_moe.presets import glm45, glm45_air, glm46

__all__ = ["glm45", "glm45_air", "glm46"]
