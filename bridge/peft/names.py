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
# Mamba-2 mixers (MambaLayer.mixer) and Gated DeltaNet (TransformerLayer.self_attention) both name their
# projections in_proj / out_proj: Megatron-Bridge's targets for both. A layer without the linear (a hybrid's
# attention or MLP layer, a softmax-attention layer beside Gated DeltaNet ones) takes no adapter for it.
TARGETS |= {
    "in_proj": ("mixer", "column"),
    "out_proj": ("mixer", "row"),
}
# target -> further holders that may hold it (the first that has the linear is adapted)
OTHER_HOLDERS: dict[str, tuple[str, ...]] = {"in_proj": ("self_attention",), "out_proj": ("self_attention",)}
# Megatron-Core's multi-latent attention (MLASelfAttention: DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash) has no
# linear_qkv: its query, latent-KV and head projections, under Megatron-Bridge's names. The down
# projections are column-parallel in the local spec (each rank a slice of the latent, gathered by MLA).
MLA_TARGETS: dict[str, tuple[str, str]] = {
    "linear_q_proj": ("self_attention", "column"),  # q_lora_rank None: the query straight from hidden
    "linear_q_down_proj": ("self_attention", "column"),
    "linear_q_up_proj": ("self_attention", "column"),
    "linear_kv_down_proj": ("self_attention", "column"),  # the KV latent and the shared RoPE key
    "linear_kv_up_proj": ("self_attention", "column"),  # per head [k_nope; v]
}
TARGETS.update(MLA_TARGETS)
SUFFIX = "_adapter"
_ADAPTER = re.compile(r"(?:^|\.)(?:" + "|".join(TARGETS) + r")" + SUFFIX + r"(?:\.|$)")


def holders(target: str) -> tuple[str, ...]:
    """The submodules of a layer that may hold `target`, in the order they are looked up."""
    return (TARGETS[target][0], *OTHER_HOLDERS.get(target, ()))


def adapter_name(target: str) -> str:
    """The attribute name of `target`'s adapter on the module holding `target`."""
    return target + SUFFIX


def is_adapter_param(name: str) -> bool:
    """True for a parameter (or state-dict / sharded-state-dict key) of a PEFT adapter."""
    return _ADAPTER.search(name) is not None
