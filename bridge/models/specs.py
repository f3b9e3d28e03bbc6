"""Layer specs for GPTModel: Transformer Engine's when it can run, else Megatron-Core's local spec.

The local spec gets bridge's SequenceParallelNorm in place of Megatron-Core's torch-norm wrapper (which
refuses sequence parallelism), in the layers and as the final norm, so `sequence_parallel=True` works
without Transformer Engine (e.g. on CPU).

Its core attention follows `attention_backend` (the TE spec lets Transformer Engine read it instead):
"auto" (the default), "flash" and "fused" get bridge's SDPAttention (torch's scaled_dot_product_attention,
a fused kernel on CPU too); "unfused" and "local" keep Megatron-Core's DotProductAttention. Configs sdpa
cannot run (sliding windows, softmax_type other than vanilla; see attention.unsupported_reason) keep
DotProductAttention whatever the backend, with a log line saying so. Multi-latent attention always gets
SDPAttention (DotProductAttention takes no k_channels / v_channels, which MLA passes), and a config sdpa
cannot run is refused for it. SDPAttention is also the local
spec's context-parallel attention (K/V all-gathered over the CP group; see bridge.models.attention):
with context_parallel_size > 1 and no Transformer Engine, a config that would keep DotProductAttention
(which refuses CP) is refused by the model build (bridge.models.provider_build).

Its MoE experts' first linear is ExpertColumnParallelLinear: Megatron-Core's ColumnParallelLinear, built
without sequence parallelism when the expert tensor-parallel group has one rank (ETP=1, e.g. TP=2 EP=2).
Megatron-Core itself turns sequence parallelism off for such a layer, but only after warning
"`sequence_parallel` is set to `True`, but tensor model parallel size is 1. Disabling sequence
parallel." (megatron/core/tensor_parallel/layers.py, ColumnParallelLinear.__init__, in 0.16.1 and
0.19.2), which reads as if the user's sequence_parallel=True were dropped. It is not: the experts run
on the tokens the MoE dispatcher hands them, and a one-rank group has no sequence to split; the
attention, dense and shared-expert layers (TP group) keep sequence parallelism. Same module, same
numbers, no message. The Transformer Engine spec's expert layers never issue it. Their linear_fc2 is
ExpertRowParallelLinear: with a one-rank expert tensor-parallel group it hands its output on as is, where
Megatron-Core's one-rank reduce returns a view that the expert bias add (GPT-OSS) modifies in place.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging

from bridge.errors import ConfigError
from bridge.models.variant_spec import with_layer_variant

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


def uses_te_spec(variant=None) -> bool:
    """Transformer Engine's spec, or the local one: TE when it can run and the layer variant is the
    default (TE's spec has no post-branch norms, projection-wide q/k norms or soft-capping, so a
    family that needs them runs Megatron-Core's local modules, on CUDA as on CPU)."""
    return use_transformer_engine() and (variant is None or variant.is_default)


def gpt_block_spec(config, vp_stage: int | None = None, variant=None):
    """The TransformerBlock spec for this pipeline (virtual) stage: its layers and its final norm.
    `variant` (bridge.models.layer_variant.LayerVariant) swaps in the family's layer modules; Gated
    DeltaNet layers (bridge.models.linear_attention) replace the attention of the linear layers."""
    block = _gpt_block_spec(config, vp_stage, variant)
    if getattr(config, "experimental_attention_variant", None) == "gated_delta_net":
        from bridge.models.linear_attention import with_gated_delta_net

        block = with_gated_delta_net(block, config, vp_stage)
    return block


def _gpt_block_spec(config, vp_stage: int | None, variant):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    from bridge.models.linear_attention import block_spec_config

    te = uses_te_spec(variant)
    if use_transformer_engine() and not te:
        logger.info("layer variant %s: Megatron-Core's local spec (Transformer Engine's has none)", variant)
    block = get_gpt_decoder_block_spec(
        block_spec_config(config),
        use_transformer_engine=te,
        normalization=config.normalization,
        qk_l2_norm=config.qk_l2_norm,
        vp_stage=vp_stage,
    )
    if te:
        return block
    if getattr(config, "multi_latent_attention", False):
        _mla_knows_te_is_absent()
    block = _with_sequence_parallel_norms(block)
    block = _with_expert_linears(block)
    if variant is not None and not variant.is_default:
        block = with_layer_variant(block, variant)
        if variant.explicit_attention:
            return block  # its core attention is bridge's explicit one, whatever the backend
    attention = local_core_attention(config)
    if attention is None:
        return block
    return _with_core_attention(block, attention)


def gpt_mtp_block_spec(config, block, vp_stage: int | None = None, variant=None):
    """Megatron-Core's multi-token-prediction block spec for this stage (None: no MTP layer here). Its
    layers are the decoder's last layer spec (`block`, as gpt_block_spec made it) behind the MTP norms and
    projection; on the local spec the norms are SequenceParallelNorm, as the decoder's."""
    if not getattr(config, "mtp_num_layers", None):
        return None
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

    if getattr(config, "experimental_attention_variant", None) == "gated_delta_net":
        from bridge.models.linear_attention import check_mtp_layer

        check_mtp_layer(config)
    te = uses_te_spec(variant)
    spec = get_gpt_mtp_block_spec(config, block, use_transformer_engine=te, vp_stage=vp_stage)
    if spec is None or te:
        return spec
    from bridge.models.norms import SequenceParallelNorm

    norms = dict(enorm=SequenceParallelNorm, hnorm=SequenceParallelNorm, layer_norm=SequenceParallelNorm)
    layers = [
        dataclasses.replace(s, submodules=dataclasses.replace(s.submodules, **norms))
        for s in spec.layer_specs
    ]
    return dataclasses.replace(spec, layer_specs=layers)


def _mla_knows_te_is_absent() -> None:
    """megatron-core 0.16.1 without Transformer Engine: megatron.core.extensions.transformer_engine
    stands in a MagicMock for `te`, so its TELinear is a mock, not a class, and multi_latent_attention's
    `HAVE_TE` (its import of TELinear succeeded) is True; MultiLatentAttention.__init__ then calls
    isinstance(linear_proj, TELinear), a TypeError. That check is its only use of HAVE_TE (an fp8/fp4
    memory option of TE's linear): with TE absent it is False, as 0.19.2 sets it."""
    from megatron.core.transformer import multi_latent_attention as mla

    if getattr(mla, "HAVE_TE", False) and not isinstance(getattr(mla, "TELinear", None), type):
        mla.HAVE_TE = False


def local_core_attention(config):
    """The core-attention class for the local spec: SDPAttention, or None to keep DotProductAttention."""
    from bridge.models.attention import SDPAttention, unsupported_reason

    backend = config.attention_backend.name
    mla = bool(getattr(config, "multi_latent_attention", False))
    if backend not in SDPA_BACKENDS and not mla:
        return None
    reason = unsupported_reason(config)
    if mla:
        # MultiLatentAttention builds its core attention with k_channels / v_channels, which
        # DotProductAttention does not take (0.16.1, 0.19.2): SDPAttention whatever the backend.
        if reason is not None:
            raise ConfigError(
                f"{reason}; multi-latent attention on the local spec runs only through sdpa attention "
                "(Megatron-Core's DotProductAttention has no separate value head size). Fix: drop that "
                "setting, or install transformer-engine on a CUDA machine"
            )
        return SDPAttention
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


class _NoSequenceParallel:
    """Reads through to a config, except sequence_parallel (False): given to ColumnParallelLinear's
    constructor only, which reads config.sequence_parallel there once to set self.sequence_parallel."""

    sequence_parallel = False

    def __init__(self, config):
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name):
        return getattr(self._config, name)


@functools.cache
def expert_column_parallel_linear() -> type:
    """ColumnParallelLinear for MoE experts that, with a one-rank expert tensor-parallel group, is built
    with sequence parallelism off directly (the state Megatron-Core's own fallback ends in, without its
    misleading "Disabling sequence parallel." warning). Any other group size: ColumnParallelLinear."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.utils import get_pg_size, get_tensor_model_parallel_group_if_none

    class ExpertColumnParallelLinear(ColumnParallelLinear):
        def __init__(
            self, input_size, output_size, *, config, is_expert: bool = False, tp_group=None, **kwargs
        ):
            build_config = config
            if config.sequence_parallel and is_expert:
                group = get_tensor_model_parallel_group_if_none(tp_group, is_expert=True)
                if get_pg_size(group) <= 1:
                    build_config = _NoSequenceParallel(config)
            super().__init__(
                input_size, output_size, config=build_config, is_expert=is_expert, tp_group=tp_group, **kwargs
            )
            self.config = config  # the real one from here on (forward reads it)

    ExpertColumnParallelLinear.__module__ = __name__
    ExpertColumnParallelLinear.__qualname__ = "ExpertColumnParallelLinear"
    return ExpertColumnParallelLinear


@functools.cache
def expert_row_parallel_linear() -> type:
    """RowParallelLinear for MoE experts that, with a one-rank expert tensor-parallel group, hands its
    output on as it is (Megatron-Core's explicit_expert_comm path). Without expert parallelism Megatron-Core
    sends it through reduce_from_tensor_model_parallel_region (or the sequence-parallel reduce-scatter),
    which on one rank returns its input: autograd makes that a view, and the expert MLP's in-place bias
    add (mlp.py, `output += output_bias ...`, GPT-OSS's expert biases) then raises "Output 0 of
    _ReduceFromModelParallelRegion is a view and is being modified inplace" (TP=1 EP=1, TP=2 ETP=1 EP=1;
    0.16.1 and 0.19.2). A reduce over one rank is the identity, so the numbers are the same."""
    from megatron.core.tensor_parallel.layers import RowParallelLinear
    from megatron.core.utils import get_pg_size

    class ExpertRowParallelLinear(RowParallelLinear):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.is_expert and self.skip_bias_add and get_pg_size(self.tp_group) <= 1:
                self.explicit_expert_comm = True

    ExpertRowParallelLinear.__module__ = __name__
    ExpertRowParallelLinear.__qualname__ = "ExpertRowParallelLinear"
    return ExpertRowParallelLinear


def _with_expert_linears(block):
    """The block spec with each MoE layer's expert MLPSubmodules.linear_fc1 = ExpertColumnParallelLinear
    (where it is Megatron-Core's ColumnParallelLinear: the local SequentialMLP). Walks ModuleSpecs
    (0.16.1) and functools.partial builders (0.19.2) alike."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    expert_linear = expert_column_parallel_linear()
    expert_row_linear = expert_row_parallel_linear()

    def experts(spec):  # the experts' spec: MLPSubmodules -> swapped linear_fc1 and linear_fc2
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
            if getattr(spec, "linear_fc1", None) is ColumnParallelLinear:
                changes = {"linear_fc1": expert_linear}
                if getattr(spec, "linear_fc2", None) is RowParallelLinear:
                    changes["linear_fc2"] = expert_row_linear
                return dataclasses.replace(spec, **changes)
            return walk(spec, experts)
        return walk(spec, experts)

    def anywhere(spec):  # above the MoE layer: find MoESubmodules
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type) and hasattr(spec, "experts"):
            return dataclasses.replace(spec, experts=experts(spec.experts))
        return walk(spec, anywhere)

    def walk(spec, visit):
        if isinstance(spec, functools.partial):
            subs = spec.keywords.get("submodules")
            new = visit(subs) if subs is not None else None
            if new is subs:
                return spec
            return functools.partial(spec.func, *spec.args, **{**spec.keywords, "submodules": new})
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
            changes = {}
            for f in dataclasses.fields(spec):
                value = getattr(spec, f.name)
                if isinstance(value, functools.partial) or (
                    dataclasses.is_dataclass(value) and not isinstance(value, type)
                ):
                    new = visit(value)
                    if new is not value:
                        changes[f.name] = new
            return dataclasses.replace(spec, **changes) if changes else spec
        return spec

    swapped = {}  # the same layer spec object repeats for every layer: swap it once
    for spec in block.layer_specs:
        if id(spec) not in swapped:
            swapped[id(spec)] = anywhere(spec)
    return dataclasses.replace(block, layer_specs=[swapped[id(spec)] for spec in block.layer_specs])


def __getattr__(name: str):
    # `bridge.models.specs.ExpertColumnParallelLinear` (pickling by name) without importing
    # Megatron-Core when this module is imported.
    if name == "ExpertColumnParallelLinear":
        return expert_column_parallel_linear()
    if name == "ExpertRowParallelLinear":
        return expert_row_parallel_linear()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
