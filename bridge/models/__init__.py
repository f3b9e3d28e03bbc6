"""bridge.models: GPTModelProvider and one small folder per model family (presets + HF mapping table).

Pure data at import time: nothing here imports torch or megatron.core.
"""

import importlib

from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider

# Preset name -> family folder; each preset is a function in bridge/models/<family>/presets.py.
PRESETS = {
    "llama2_7b": "llama",
    "llama3_8b": "llama",
    "llama31_8b": "llama",
    "llama31_70b": "llama",
    "llama32_1b": "llama",
    "llama32_3b": "llama",
    "qwen25_7b": "qwen2",
    "qwen3_8b": "qwen3",
    "qwen3_30b_a3b": "qwen3_moe",
    "mistral_7b": "mistral",
    "mixtral_8x7b": "mixtral",
}


def preset(name: str) -> GPTModelProvider:
    """A fresh provider from the preset called `name` (e.g. "llama32_1b")."""
    family = PRESETS.get(name)
    if family is None:
        raise ConfigError(f"model preset {name!r}: unknown. Fix: use one of {sorted(PRESETS)}.")
    return getattr(importlib.import_module(f"bridge.models.{family}.presets"), name)()


__all__ = ["GPTModelProvider", "PRESETS", "preset"]
