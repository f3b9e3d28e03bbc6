"""llama family: provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.llama.presets import (
    llama2_7b,
    llama3_8b,
    llama3_70b,
    llama31_8b,
    llama31_70b,
    llama31_405b,
    llama32_1b,
    llama32_3b,
)

__all__ = [
    "llama2_7b",
    "llama3_8b",
    "llama3_70b",
    "llama31_8b",
    "llama31_70b",
    "llama31_405b",
    "llama32_1b",
    "llama32_3b",
]
