"""Qwen3-VL-MoE's image side sized for the planner: Qwen3-VL's (the same vision model and mergers)."""

from bridge.models.qwen3_vl.vision_size import activations, image_tokens, vision_parameters

__all__ = ["activations", "image_tokens", "vision_parameters"]
