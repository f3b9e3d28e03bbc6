"""Attach PEFT adapters to this rank's Megatron-Core GPTModel chunks, and find them again.

    provider.register_post_build_hook(functools.partial(apply_peft, peft=cfg.peft, seed=cfg.rng.seed))

runs on the bare chunks after the weights are loaded (earlier hooks) and before any DDP wrapper: every
base parameter is frozen and each target linear of every TransformerLayer gets a ParallelAdapter
sibling (bridge.peft.adapters) wired in by a forward hook. A layer without a target's linear (a hybrid's
Mamba, attention and MLP layers hold different ones) takes no adapter for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from bridge.errors import ConfigError
from bridge.models.adapter_marks import mark_adapters
from bridge.parallel.wrappers import unwrap, unwrap_all
from bridge.peft.adapters import AdapterHook, NormSpec, ParallelAdapter, tp_size_rank
from bridge.peft.names import TARGETS, adapter_name, holders, is_adapter_param


class AdaptedLinear(NamedTuple):
    name: str  # the base linear's module path in its (unwrapped) chunk, e.g. decoder.layers.0.mlp.linear_fc1
    base: nn.Module
    adapter: ParallelAdapter


def _check(peft: Any) -> None:
    if peft.scheme not in ("lora", "dora"):
        raise ConfigError(f"peft.scheme={peft.scheme!r}: apply_peft attaches lora or dora adapters")
    unknown = [t for t in peft.target_modules if t not in TARGETS]
    if not peft.target_modules or unknown or len(set(peft.target_modules)) != len(peft.target_modules):
        raise ConfigError(
            f"peft.target_modules={list(peft.target_modules)!r}: must be a non-empty list without repeats "
            f"of {', '.join(TARGETS)}"
        )
    if not isinstance(peft.dim, int) or peft.dim < 1 or peft.alpha <= 0 or not 0 <= peft.dropout < 1:
        raise ConfigError(
            f"peft.dim={peft.dim!r} alpha={peft.alpha!r} dropout={peft.dropout!r}: need dim >= 1, alpha > 0, "
            "0 <= dropout < 1"
        )


def _layers(model: nn.Module) -> list[nn.Module]:
    decoder = getattr(model, "decoder", None)
    return list(getattr(decoder, "layers", ())) if decoder is not None else []


def _bases_of(layer: nn.Module, target: str) -> list[tuple[nn.Module, nn.Module, int | None]]:
    """(holder, base linear, global expert index or None) of every linear `target` names in `layer`: one
    for attention, dense MLPs, Mamba-2 mixers and Gated DeltaNet; in a mixture-of-experts layer linear_fc1 /
    linear_fc2 name every local routed expert's (Megatron-Bridge's meaning of the two targets). None in a
    layer without it (a hybrid's other layer kinds, a softmax-attention layer beside Gated DeltaNet ones)."""
    for holder_name in holders(target):
        holder = getattr(layer, holder_name, None)
        if holder_name == "mlp" and holder is not None and hasattr(holder, "experts"):
            return _expert_bases(layer, holder, target)
        if holder is not None and hasattr(holder, target):
            return [(*_base_of(layer, holder_name, holder, target), None)]
    return []


def _holds(layer: nn.Module, target: str) -> bool:
    """Whether `layer` has a linear `target` names (adaptable or not: for naming the choices)."""
    try:
        return bool(_bases_of(layer, target))
    except ConfigError:  # it has it, but adapters do not cover it there (e.g. shared experts)
        return True


def _attention_only(layer: nn.Module) -> str:
    """The override that adapts this layer's attention only (multi-latent attention has no linear_qkv)."""
    attention = getattr(layer, "self_attention", None)
    present = [t for t, (h, _) in TARGETS.items() if h == "self_attention" and hasattr(attention, t)]
    return f"peft.target_modules=[{','.join(present or ('linear_qkv', 'linear_proj'))}]"


def _expert_bases(layer: nn.Module, moe: nn.Module, target: str) -> list[tuple[nn.Module, nn.Module, int]]:
    layer_no = getattr(layer, "layer_number", "?")
    local = getattr(moe.experts, "local_experts", None)
    if local is None:
        raise ConfigError(
            f"peft.target_modules contains {target}: layer {layer_no}'s experts are grouped-GEMM weights "
            f"({type(moe.experts).__name__}, model.moe_grouped_gemm=true); adapters attach to sequential experts "
            "(one linear per expert). Fix: model.moe_grouped_gemm=false, or adapt the attention only: "
            + _attention_only(layer)
        )
    if getattr(moe, "shared_experts", None) is not None:
        raise ConfigError(
            f"peft.target_modules contains {target}: layer {layer_no} has shared experts, which adapters do "
            "not cover yet (routed experts only). Fix: adapt the attention only, " + _attention_only(layer)
        )
    out = []
    for index, expert in zip(moe.local_expert_indices, local, strict=True):
        holder, base = _base_of(layer, "mlp", expert, target)
        if tp_size_rank(base)[0] != 1:
            raise ConfigError(
                f"peft.target_modules contains {target}: layer {layer_no}'s experts are split over "
                f"{tp_size_rank(base)[0]} expert-tensor-parallel ranks; adapters on experts need "
                "model.expert_tensor_parallel_size=1. Fix: set it, or " + _attention_only(layer)
            )
        out.append((holder, base, int(index)))
    return out


def _base_of(
    layer: nn.Module, holder_name: str, holder: nn.Module | None, target: str
) -> tuple[nn.Module, nn.Module]:
    layer_no = getattr(layer, "layer_number", "?")
    base = getattr(holder, target, None) if holder is not None else None
    if holder is not None and base is None:  # e.g. linear_qkv of multi-latent attention
        present = [t for t, (h, _) in TARGETS.items() if h == holder_name and hasattr(holder, t)]
        raise ConfigError(
            f"peft.target_modules contains {target}: the {holder_name} of layer {layer_no} "
            f"({type(holder).__name__}) has no {target}. Fix: target its linears instead, among "
            f"{', '.join(present) or 'none'}"
        )
    weight = getattr(base, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise ConfigError(
            f"peft target {holder_name}.{target} of layer {layer_no} is not a linear layer with a 2-D weight "
            f"({type(base).__name__}); build the model with bridge's GPTModelProvider"
        )
    if getattr(base, "gather_output", False) or not getattr(base, "input_is_parallel", True):
        raise ConfigError(
            f"{holder_name}.{target} of layer {layer_no}: gathered / scattered linears are not supported"
        )
    if getattr(base, "parallel_mode", None) == "duplicated" and tp_size_rank(base)[0] > 1:
        # Transformer Engine's MLA down projections (TELinear, parallel_mode "duplicated"): whole on every
        # TP rank, outside the TP group the adapter's split and its checkpoint axes assume
        raise ConfigError(
            f"peft.target_modules contains {target}: layer {layer_no}'s {target} is Transformer Engine's "
            "duplicated linear (whole on every tensor-parallel rank), which adapters do not cover at "
            "tensor parallelism > 1. Fix: leave it out of peft.target_modules, or run at model.tensor_model_parallel_size=1"
        )
    return holder, base


def row_blocks(holder: nn.Module | None, target: str) -> tuple[tuple[str, int], ...]:
    """The named row blocks of a fused in_proj's local weight, as its holder's sharded_state_dict stores them
    apart (Megatron-Core's Mamba-2 mixer and Gated DeltaNet, 0.16.1 and 0.19): the adapter's B is stored the
    same way, so that a checkpoint saved at one TP size loads at another. () for every other linear."""
    if target != "in_proj" or holder is None:
        return ()
    if hasattr(holder, "d_inner_local_tp"):  # MambaMixer: [z; x; B; C; dt] of this rank's heads
        d, gs = holder.d_inner_local_tp, holder.ngroups_local_tp * holder.d_state
        return (("z", d), ("x", d), ("B", gs), ("C", gs), ("dt", holder.nheads_local_tp))
    if hasattr(holder, "in_proj_split_names"):  # GatedDeltaNet, 0.19
        return tuple(zip(holder.in_proj_split_names, map(int, holder.in_proj_split_sections), strict=True))
    if hasattr(holder, "qk_dim"):  # GatedDeltaNet, 0.16.1: [q; k; v; z; beta; alpha] of this rank's heads
        tp = holder.tp_size
        qk, v, heads = holder.qk_dim // tp, holder.v_dim // tp, holder.num_value_heads // tp
        return (("query", qk), ("key", qk), ("value", v), ("z", v), ("beta", heads), ("alpha", heads))
    raise ConfigError(
        f"peft target in_proj of {type(holder).__name__}: adapters know the in_proj of Megatron-Core's "
        "MambaMixer and GatedDeltaNet; remove in_proj from peft.target_modules"
    )


def build_adapter(
    base: nn.Module,
    target: str,
    peft: Any,
    config: Any,
    layer_number: int,
    expert: int | None = None,
    holder: nn.Module | None = None,
) -> ParallelAdapter:
    """The adapter for `base` (not attached): its shapes from the base's local weight and TP size."""
    kind = TARGETS[target][1]
    tp_size, tp_rank = tp_size_rank(base)
    out_local, in_local = base.weight.shape
    in_features, out_features = (
        (in_local, out_local * tp_size) if kind == "column" else (in_local * tp_size, out_local)
    )
    norm = None
    if hasattr(base, "layer_norm_weight"):  # Transformer Engine's fused norm + column linear
        norm = NormSpec(
            normalization=config.normalization,
            eps=config.layernorm_epsilon,
            zero_centered_gamma=bool(getattr(config, "layernorm_zero_centered_gamma", False)),
        )
    return ParallelAdapter(
        target=target,
        kind=kind,
        scheme=peft.scheme,
        dim=peft.dim,
        alpha=peft.alpha,
        dropout=peft.dropout,
        in_features=in_features,
        out_features=out_features,
        tp_size=tp_size,
        tp_rank=tp_rank,
        sequence_parallel=bool(getattr(base, "sequence_parallel", config.sequence_parallel)),
        gated=target == "linear_fc1" and bool(config.gated_linear_unit),
        layer_number=layer_number,
        norm=norm,
        dtype=base.weight.dtype,
        device=base.weight.device,
        expert=expert,
        row_blocks=row_blocks(holder, target),
    )


def attach_adapter(holder: nn.Module, target: str, adapter: ParallelAdapter, seed: int) -> None:
    """Register `adapter` as `holder.<target>_adapter`, hook it onto `holder.<target>`, initialise it."""
    base = getattr(holder, target)
    holder.add_module(adapter_name(target), adapter)
    # prepended: before any output hook the base has of its own (e.g. a post-branch norm)
    base.register_forward_hook(AdapterHook(adapter), with_kwargs=True, prepend=True)
    adapter.reset_parameters(seed)
    if adapter.scheme == "dora":
        adapter.init_magnitude(base)
    if adapter.expert is not None:  # Megatron-Core's mark of expert parameters: DDP reduces their gradients
        for param in adapter.parameters():  # over the expert-data-parallel group, not across expert ranks
            param.allreduce = False


def apply_peft(chunks: list, peft: Any, seed: int) -> None:
    """Freeze every base parameter and attach an adapter to each target linear (in place).

    `peft` is a PeftConfig (scheme None: nothing to do). In a mixture-of-experts layer linear_fc1 and
    linear_fc2 adapt every local routed expert. Raises ConfigError for experts it cannot adapt (grouped
    GEMM, shared experts, expert tensor parallelism), a model that already has adapters, or bad settings.
    """
    if peft.scheme is None:
        return
    _check(peft)
    models = unwrap_all(chunks)
    if has_adapters(models):
        raise ConfigError("apply_peft: the model already has PEFT adapters")
    whole = len(models) == 1 and all(getattr(models[0], k, True) for k in ("pre_process", "post_process"))
    found = dict.fromkeys(peft.target_modules, 0)
    for model in models:
        for layer in _layers(model):  # check every layer before changing any
            for target in peft.target_modules:
                found[target] += len(_bases_of(layer, target))
    missing = [t for t, n in found.items() if n == 0]
    if whole and missing:  # (a pipeline stage may hold none of a hybrid's layers of one kind)
        where = "; ".join(f"{t} in a layer's {' or '.join(holders(t))}" for t in missing)
        held = sorted({t for layer in _layers(models[0]) for t in TARGETS if _holds(layer, t)})
        raise ConfigError(
            f"peft.target_modules={list(peft.target_modules)!r}: no layer of the model has {where} (its "
            f"layers hold {', '.join(held) or 'no adapter target'}). Fix: remove {', '.join(missing)}, e.g. "
            f"peft.target_modules=[{','.join(t for t in peft.target_modules if t not in missing) or ','.join(held)}]"
        )
    for model in models:
        layers = _layers(model)
        for param in model.parameters():
            param.requires_grad_(False)
        for layer in layers:
            for target in peft.target_modules:
                for holder, base, expert in _bases_of(layer, target):
                    adapter = build_adapter(
                        base, target, peft, model.config, layer.layer_number, expert, holder=holder
                    )
                    attach_adapter(holder, target, adapter, seed)
        mark_adapters(model, is_adapter_param)  # how the checkpoint tells the adapters from the base


def adapted_linears(chunks: Any) -> list[AdaptedLinear]:
    """Every (base linear, adapter) pair of these chunks, in module order."""
    out = []
    for model in unwrap_all(chunks):
        for name, module in model.named_modules():
            for target in TARGETS:
                adapter = getattr(module, adapter_name(target), None)
                if isinstance(adapter, ParallelAdapter):
                    out.append(
                        AdaptedLinear(
                            f"{name}.{target}" if name else target, getattr(module, target), adapter
                        )
                    )
    return out


def has_adapters(chunks: Any) -> bool:
    return any(is_adapter_param(n) for m in unwrap_all(chunks) for n, _ in m.named_parameters())


def named_adapter_parameters(chunk: Any) -> Iterator[tuple[str, nn.Parameter]]:
    """(name, parameter) of one chunk's adapters, names as in the unwrapped chunk."""
    for name, param in unwrap(chunk).named_parameters():
        if is_adapter_param(name):
            yield name, param


def adapter_parameters(chunks: Any) -> list[nn.Parameter]:
    """The trainable adapter parameters of all chunks (what the optimizer gets)."""
    return [p for c in unwrap_all(chunks) for _, p in named_adapter_parameters(c)]


def init_dora_magnitudes(chunks: Any) -> None:
    """Set every DoRA m to ||W + s B A||_row of the current base weights.

    apply_peft does this; call it again when the base weights were loaded after it (e.g. a torch_dist
    pretrained checkpoint loaded after the build), before the optimizer copies the parameters.
    """
    for item in adapted_linears(chunks):
        if item.adapter.scheme == "dora":
            item.adapter.init_magnitude(item.base)
