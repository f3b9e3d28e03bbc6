"""bridge: GPT models on Megatron-Core, described as data, trained from recipes, converted to and from HF.

`import bridge` stays light (no torch, no megatron.core): the names below load on first use.
"""

import importlib

from bridge.errors import ConfigError

__version__ = "0.1.0"

_LAZY = {
    "ParallelLayout": "bridge.parallel.layout",
    "GPTModelProvider": "bridge.models.gpt_provider",
    "ConfigContainer": "bridge.config.container",
    "AutoBridge": "bridge.conversion.auto_bridge",
}

__all__ = ["ConfigError", "__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge' has no attribute {name!r}")

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
