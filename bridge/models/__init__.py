"""bridge.models: GPTModelProvider and one small folder per model family (presets + HF mapping table).

Pure data at import time: nothing here imports torch or megatron.core.
"""

from bridge.errors import ConfigError
from bridge.models.families import preset_factory, preset_families
from bridge.models.gpt_provider import GPTModelProvider

# Preset name -> family folder, from the family registry (bridge.models.families).
PRESETS = preset_families()


def preset(name: str) -> GPTModelProvider:
    """A fresh provider from the preset called `name` (e.g. "llama32_1b")."""
    factory = preset_factory(name)
    if factory is None:
        raise ConfigError(f"model preset {name!r}: unknown. Fix: use one of {sorted(PRESETS)}.")
    return factory()


__all__ = ["GPTModelProvider", "PRESETS", "preset"]
