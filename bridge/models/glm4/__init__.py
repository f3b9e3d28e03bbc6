"""glm4 family (GLM-4-0414): provider presets; mapping.py and hf_config.py beside them."""

from bridge.models.glm4.presets import glm4_9b, glm4_32b_0414

__all__ = ["glm4_9b", "glm4_32b_0414"]
