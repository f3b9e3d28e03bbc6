"""glm4_moe family (GLM-4.5 / 4.6 / Air): provider presets (mapping.py, the HF mapping table, belongs to the conversion layer)."""

from bridge.models.glm4_moe.presets import glm45, glm45_air, glm46

__all__ = ["glm45", "glm45_air", "glm46"]
