"""qwen2 family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.qwen2.presets import (
    qwen2_1p5b,
    qwen2_7b,
    qwen2_72b,
    qwen2_500m,
    qwen25_1p5b,
    qwen25_7b,
    qwen25_14b,
    qwen25_32b,
    qwen25_72b,
    qwen25_500m,
)

__all__ = [
    "qwen2_500m",
    "qwen2_1p5b",
    "qwen2_7b",
    "qwen2_72b",
    "qwen25_500m",
    "qwen25_1p5b",
    "qwen25_7b",
    "qwen25_14b",
    "qwen25_32b",
    "qwen25_72b",
]
