"""Layer specs for GPTModel: Transformer Engine's when it can run, else Megatron-Core's local spec.

The local spec gets bridge's SequenceParallelNorm in place of Megatron-Core's torch-norm wrapper (which
refuses sequence parallelism), in the layers and as the final norm, so `sequence_parallel=True` works
without Transformer Engine (e.g. on CPU).

Its core attention follows `attention_backend` (the TE spec lets Transformer Engine read it instead):
"auto" (the default), "flash" and "fused" get bridge's SDPAttention (torch's scaled_dot_product_attention,
a fused kernel on CPU too); "unfused" and "local" keep Megatron-Core's DotProductAttention. Configs sdpa
cannot run (sliding windows, softmax_type other than vanilla; see attention.unsupported_reason) keep
DotProductAttention whatever the backend, with a log line saying so.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging

logger = logging.getLogger(__name__)

# attention_backend names for which the local spec uses SDPAttention.
SDPA_BACKENDS = ("auto", "flash", "fused")


@functools.cache
def use_transformer_engine() -> bool:
    """Transformer Engine is importable and CUDA is present."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # an installed but broken TE (e.g. built for another CUDA) is as good as none
        return False
    return True


def gpt_block_spec(config, vp_stage: int | None = None):
    """The TransformerBlock spec for this pipeline (virtual) stage: its layers and its final norm."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    te = use_transformer_engine()
    block = get_gpt_decoder_block_spec(
        config,
        use_transformer_engine=te,
        normalization=config.normalization,
        qk_l2_norm=config.qk_l2_norm,
        vp_stage=vp_stage,
    )
    if te:
        return block
    block = _with_sequence_parallel_norms(block)
    attention = local_core_attention(config)
    if attention is None:
        return block
    return _with_core_attention(block, attention)


def local_core_attention(config):
    """The core-attention class for the local spec: SDPAttention, or None to keep DotProductAttention."""
    from bridge.models.attention import SDPAttention, unsupported_reason

    backend = config.attention_backend.name
    if backend not in SDPA_BACKENDS:
        return None
    reason = unsupported_reason(config)
    if reason is not None:
        logger.info("attention_backend=%s: using Megatron-Core's DotProductAttention (%s)", backend, reason)
        return None
    return SDPAttention


def _with_core_attention(block, core_attention):
    swapped = {}  # one spec object per distinct layer kind
    for spec in block.layer_specs:
        if id(spec) in swapped:
            continue
        attention = spec.submodules.self_attention
        attn_subs = getattr(attention, "submodules", None)
        if attn_subs is None or not hasattr(attn_subs, "core_attention"):
            swapped[id(spec)] = spec
            continue
        attention = dataclasses.replace(
            attention, submodules=dataclasses.replace(attn_subs, core_attention=core_attention)
        )
        swapped[id(spec)] = dataclasses.replace(
            spec, submodules=dataclasses.replace(spec.submodules, self_attention=attention)
        )
    return dataclasses.replace(block, layer_specs=[swapped[id(spec)] for spec in block.layer_specs])


def _with_sequence_parallel_norms(block):
    from megatron.core.transformer.identity_op import IdentityOp

    from bridge.models.norms import SequenceParallelNorm

    def swap(norm):
        # IdentityOp (no q/k norm) and L2Norm (qk_l2_norm, no weights) stay as they are.
        if norm is IdentityOp or getattr(norm, "__name__", "") == "L2Norm":
            return norm
        return SequenceParallelNorm

    swapped = {}  # the same layer spec object repeats for every layer: swap it once
    for spec in block.layer_specs:
        if id(spec) in swapped:
            continue
        subs = spec.submodules
        changes = {
            name: swap(getattr(subs, name))
            for name in ("input_layernorm", "pre_mlp_layernorm")
            if getattr(subs, name) is not IdentityOp
        }
        attention = subs.self_attention
        attn_subs = getattr(attention, "submodules", None)
        attn_norms = ("q_layernorm", "k_layernorm", "kv_layernorm")  # kv_layernorm: multi-latent attention
        attn_changes = {n: swap(getattr(attn_subs, n)) for n in attn_norms if hasattr(attn_subs, n)}
        if attn_changes:
            attention = dataclasses.replace(
                attention, submodules=dataclasses.replace(attn_subs, **attn_changes)
            )
            changes["self_attention"] = attention
        swapped[id(spec)] = dataclasses.replace(spec, submodules=dataclasses.replace(subs, **changes))
    layer_specs = [swapped[id(spec)] for spec in block.layer_specs]
    return dataclasses.replace(block, layer_specs=layer_specs, layer_norm=SequenceParallelNorm)
