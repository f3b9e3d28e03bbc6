"""Where PEFT adapters live in a Megatron-Core model, by name (pure Python: no torch import).

An adapter is a sibling of the linear layer it adapts: `self_attention.linear_qkv` gets
`self_attention.linear_qkv_adapter`, so every base parameter keeps its name (the conversion tables and
torch_dist checkpoint keys rely on them) and adapter parameters are recognisable by name alone.
"""

from __future__ import annotations

import re

# target (PeftConfig.target_modules) -> (submodule of the TransformerLayer holding it, parallel kind)
TARGETS: dict[str, tuple[str, str]] = {
    "linear_qkv": ("self_attention", "column"),
    "linear_proj": ("self_attention", "row"),
    "linear_fc1": ("mlp", "column"),
    "linear_fc2": ("mlp", "row"),
}
SUFFIX = "_adapter"
_ADAPTER = re.compile(r"(?:^|\.)(?:" + "|".join(TARGETS) + r")" + SUFFIX + r"(?:\.|$)")


def adapter_name(target: str) -> str:
    """The attribute name of `target`'s adapter on the module holding `target`."""
    return target + SUFFIX


def is_adapter_param(name: str) -> bool:
    """True for a parameter (or state-dict / sharded-state-dict key) of a PEFT adapter."""
    return _ADAPTER.search(name) is not None
