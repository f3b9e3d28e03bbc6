"""LoRA and DoRA adapters for Megatron-Core's tensor-parallel linear layers.

An adapter adds `s * B A x` (s = alpha / dim) to a base linear `y = W x`; DoRA (peft's use_dora) also
rescales each output row: `m / ||W + s B A||_row * (W x + s B A x)`, with the norm detached. The
adapter is a sibling module of its base (names: bridge.peft.names) and a forward hook on the base adds
its output, so the base keeps its parameter names and its own kernels.

Tensor parallelism follows the base's split; the communication keeps every gradient complete:

- column-parallel base (linear_qkv, linear_fc1: output rows split): A [r, in] replicated, B [out/tp, r]
  split like W's rows. h = A x is the same on every rank; `copy_to_tensor_model_parallel_region(h)` is
  the identity forward and all-reduces dh backward, so dA and dx are complete on every rank. With
  sequence parallelism x holds this rank's tokens: it is all-gathered first (the backward only splits,
  the gradient being complete already).
- row-parallel base (linear_proj, linear_fc2: input columns split): A [r, in/tp] split like W's
  columns, B [out, r] replicated. h = all-reduce(A x_local) (reduce_from_tensor_model_parallel_region),
  y = B h; with sequence parallelism y is then split to this rank's tokens, as the base's output is.
- DoRA: m is split like the output rows (column) or replicated (row; the squared row norms of the
  local columns are all-reduced). With sequence parallelism a row base's output holds this rank's
  tokens only, so dm is partial: the scale goes through copy_to_tensor_model_parallel_region, whose
  backward all-reduces it.

Dropout acts on the adapter's input only: DoRA trains m / ||W + s B A||_row * (W x + s B A dropout(x)).
(peft's DoRA with dropout > 0 in training instead adds (m / ||.|| - 1) W dropout(x) to W x; both agree
in evaluation and without dropout.) A replicated input draws from the default generator (the same mask
on every TP rank), a TP-sharded one (row bases) inside Megatron-Core's model-parallel RNG tracker.

Fused column bases whose checkpoint stores row blocks apart (a Mamba-2 or Gated DeltaNet in_proj: each
block split over TP, so a rank holds [block 0 rows of r; block 1 rows of r; ...]) give the adapter their
`row_blocks`; its B (and DoRA's m) is stored by the same blocks, so another TP size reads it back right.

Transformer Engine's TELayerNormColumnParallelLinear takes the input before its fused norm: the adapter
applies that norm (its `layer_norm_weight`) first. Initialisation does not depend on the layout: A is
drawn whole (xavier normal) from a generator seeded by (seed, global layer number, target) and this
rank's shard kept; B is zero; DoRA's m is ||W + s B A||_row = ||W||_row.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

SCHEMES = ("lora", "dora")
KINDS = ("column", "row")


@dataclass(frozen=True)
class NormSpec:
    """The norm Transformer Engine fuses into a column-parallel linear (TransformerConfig's fields)."""

    normalization: str  # "RMSNorm" | "LayerNorm"
    eps: float
    zero_centered_gamma: bool


def apply_norm(
    x: torch.Tensor, spec: NormSpec, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """TE's fused norm, computed in fp32 as TE does, returned in x's dtype."""
    gamma = weight.float() + 1.0 if spec.zero_centered_gamma else weight.float()
    xf = x.float()
    if spec.normalization == "RMSNorm":
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + spec.eps) * gamma
    elif spec.normalization == "LayerNorm":
        beta = None if bias is None or bias.numel() == 0 else bias.float()
        out = F.layer_norm(xf, (xf.shape[-1],), gamma, beta, spec.eps)
    else:
        raise ValueError(f"normalization={spec.normalization!r}: the adapter knows RMSNorm and LayerNorm")
    return out.to(x.dtype)


def init_seed(seed: int, layer_number: int, target: str, expert: int | None = None) -> int:
    """A generator seed for one adapter, the same whatever the parallel layout (a routed expert's: its global
    index too, so experts start different and an expert's start does not depend on expert parallelism)."""
    key = f"bridge.peft/{seed}/{layer_number}/{target}" + ("" if expert is None else f"/expert{expert}")
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def tp_group_of(base: nn.Module) -> Any:
    """The tensor-parallel group the base linear was built with (Megatron-Core's default otherwise)."""
    group = getattr(base, "tp_group", None)
    if group is not None:
        return group
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_group()


def tp_size_rank(base: nn.Module) -> tuple[int, int]:
    group = getattr(base, "tp_group", None)
    if group is not None:
        return group.size(), group.rank()
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 1, 0
    return (
        parallel_state.get_tensor_model_parallel_world_size(),
        parallel_state.get_tensor_model_parallel_rank(),
    )


def bias_in_output(base: nn.Module, returned_bias: torch.Tensor | None) -> torch.Tensor | None:
    """The bias the base already added to its output (skip_bias_add=False), else None."""
    bias = getattr(base, "bias", None)
    if returned_bias is not None or not isinstance(bias, torch.Tensor) or bias.numel() == 0:
        return None
    return bias


class LinearWeight(nn.Module):
    """A bias-free linear's weight, allocated without drawing from any RNG (nn.Linear would)."""

    def __init__(self, out_features: int, in_features: int, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))


def _mark(param: nn.Parameter, split_dim: int | None) -> None:
    # Megatron-Core's attributes: grad-norm and clipping count a replicated tensor on TP rank 0 only.
    from megatron.core import tensor_parallel

    if split_dim is None:
        tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
    else:
        tensor_parallel.set_tensor_model_parallel_attributes(param, True, split_dim, 1)


class ParallelAdapter(nn.Module):
    """The LoRA / DoRA adapter of one tensor-parallel linear (its sibling; see the module docstring).

    Parameters: `linear_in.weight` (A), `linear_out.weight` (B), DoRA also `weight_magnitude` (m).
    `in_features` / `out_features` are the base's full (unsplit) sizes.
    """

    def __init__(
        self,
        *,
        target: str,
        kind: str,
        scheme: str,
        dim: int,
        alpha: float,
        dropout: float,
        in_features: int,
        out_features: int,
        tp_size: int,
        tp_rank: int,
        sequence_parallel: bool,
        gated: bool,
        layer_number: int,
        norm: NormSpec | None,
        dtype: torch.dtype,
        device: torch.device,
        expert: int | None = None,
        row_blocks: tuple[tuple[str, int], ...] = (),
    ):
        super().__init__()
        if kind not in KINDS or scheme not in SCHEMES:
            raise ValueError(f"kind={kind!r} scheme={scheme!r}: expected one of {KINDS} / {SCHEMES}")
        split = out_features if kind == "column" else in_features
        if split % tp_size:
            raise ValueError(f"{target}: {split} features do not split over {tp_size} tensor-parallel ranks")
        self.target, self.kind, self.scheme = target, kind, scheme
        self.dim, self.alpha, self.scale, self.dropout = dim, float(alpha), float(alpha) / dim, float(dropout)
        self.in_features, self.out_features = in_features, out_features
        self.tp_size, self.tp_rank = tp_size, tp_rank
        self.sequence_parallel = sequence_parallel and tp_size > 1
        self.gated, self.layer_number, self.norm = gated, layer_number, norm
        self.expert = expert  # a routed expert's global index, else None
        # a fused in_proj's named local row blocks, stored apart in checkpoints (as its base weight is)
        self.row_blocks = tuple(row_blocks)
        column = kind == "column"
        a_in = in_features if column else in_features // tp_size
        b_out = out_features // tp_size if column else out_features
        if self.row_blocks and sum(n for _, n in self.row_blocks) != b_out:
            raise ValueError(f"{target}: row blocks {self.row_blocks} do not cover its {b_out} local rows")
        self.linear_in = LinearWeight(dim, a_in, dtype, device)
        self.linear_out = LinearWeight(b_out, dim, dtype, device)
        _mark(self.linear_in.weight, None if column else 1)
        _mark(self.linear_out.weight, 0 if column else None)
        if scheme == "dora":
            self.weight_magnitude = nn.Parameter(torch.empty(b_out, dtype=dtype, device=device))
            _mark(self.weight_magnitude, 0 if column else None)

    def extra_repr(self) -> str:
        return (
            f"{self.scheme} {self.kind} target={self.target} layer={self.layer_number} r={self.dim} "
            f"alpha={self.alpha:g} dropout={self.dropout:g} tp={self.tp_rank}/{self.tp_size}"
            f"{' sp' if self.sequence_parallel else ''}{' norm=' + self.norm.normalization if self.norm else ''}"
        )

    # ---- initialisation ----------------------------------------------------------------------------

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """A: xavier normal of the full [r, in] tensor from the layout-independent seed, this rank's
        shard kept; B: zeros. (DoRA's m needs the base weight: init_magnitude.)"""
        gen = torch.Generator().manual_seed(init_seed(seed, self.layer_number, self.target, self.expert))
        std = math.sqrt(2.0 / (self.in_features + self.dim))
        full = torch.randn(self.dim, self.in_features, generator=gen) * std
        if self.kind == "row":
            full = full.chunk(self.tp_size, dim=1)[self.tp_rank]
        self.linear_in.weight.copy_(full)
        self.linear_out.weight.zero_()

    @torch.no_grad()
    def init_magnitude(self, base: nn.Module) -> None:
        """DoRA: m = ||W + s B A||_row of the base's current weight (peft's initialisation)."""
        self.weight_magnitude.copy_(self.weight_norm(base))

    # ---- the adapted weight ------------------------------------------------------------------------

    @torch.no_grad()
    def delta_weight(self) -> torch.Tensor:
        """s B A for this rank's shard of W (fp32): column [out/tp, in], row [out, in/tp]."""
        return self.scale * (self.linear_out.weight.float() @ self.linear_in.weight.float())

    @torch.no_grad()
    def row_norms(self, base: nn.Module, weight: torch.Tensor) -> torch.Tensor:
        """||weight||_row over the full rows (weight: this rank's shard of a W-shaped tensor)."""
        squares = weight.float().pow(2).sum(dim=1)
        if self.kind == "row" and self.tp_size > 1:
            torch.distributed.all_reduce(squares, group=tp_group_of(base))
        return squares.sqrt()

    @torch.no_grad()
    def weight_norm(self, base: nn.Module) -> torch.Tensor:
        """||W + s B A||_row (fp32, detached: peft does not differentiate through it)."""
        return self.row_norms(base, base.weight.float() + self.delta_weight())

    @torch.no_grad()
    def merged_weight(self, base: nn.Module) -> torch.Tensor:
        """This rank's shard of the weight with the adapter folded in, in W's dtype (W unchanged)."""
        merged = base.weight.float() + self.delta_weight()
        if self.scheme == "dora":
            merged = (self.weight_magnitude.float() / self.row_norms(base, merged)).unsqueeze(1) * merged
        return merged.to(base.weight.dtype)

    # ---- forward -----------------------------------------------------------------------------------

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        if self.dropout == 0.0 or not self.training:
            return x
        if self.kind == "row":  # a TP-sharded input: each rank its own stream, as Megatron-Core does
            from megatron.core import tensor_parallel

            with tensor_parallel.get_cuda_rng_tracker().fork():
                return F.dropout(x, self.dropout, training=True)
        return F.dropout(x, self.dropout, training=True)  # replicated: the same draw on every TP rank

    def lora_output(self, base: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """s B A dropout(x), laid out as the base's output (see the module docstring)."""
        from megatron.core import tensor_parallel as tp

        group = tp_group_of(base) if self.tp_size > 1 else None
        if self.norm is not None:
            x = apply_norm(x, self.norm, base.layer_norm_weight, getattr(base, "layer_norm_bias", None))
        a, b = self.linear_in.weight, self.linear_out.weight
        if self.kind == "column":
            if self.sequence_parallel:
                x = tp.gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=False, group=group)
            h = F.linear(self._dropout(x), a)
            if group is not None:
                h = tp.copy_to_tensor_model_parallel_region(h, group=group)
            y = F.linear(h, b)
        else:
            h = F.linear(self._dropout(x), a)
            if group is not None:
                h = tp.reduce_from_tensor_model_parallel_region(h, group=group)
            y = F.linear(h, b)
            if self.sequence_parallel:
                y = tp.scatter_to_sequence_parallel_region(y, group=group)
        return y * self.scale

    def magnitude_scale(self, base: nn.Module, dtype: torch.dtype) -> torch.Tensor:
        """DoRA's m / ||W + s B A||_row for this rank's output features."""
        scale = self.weight_magnitude / self.weight_norm(base).to(self.weight_magnitude.dtype)
        if self.kind == "row" and self.sequence_parallel:
            from megatron.core import tensor_parallel as tp

            scale = tp.copy_to_tensor_model_parallel_region(scale, group=tp_group_of(base))
        return scale.to(dtype)

    def adapt(self, base: nn.Module, x: torch.Tensor, output: Any) -> Any:
        """The base's (output, bias) with the adapter applied."""
        out, rest = (output[0], tuple(output[1:])) if isinstance(output, tuple) else (output, None)
        lora = self.lora_output(base, x).to(out.dtype)
        if self.scheme == "lora":
            new = out + lora
        else:
            included = bias_in_output(base, rest[0] if rest else None)
            core = out if included is None else out - included
            new = self.magnitude_scale(base, out.dtype) * (core + lora)
            if included is not None:
                new = new + included
        return new if rest is None else (new, *rest)

    # ---- distributed checkpointing -----------------------------------------------------------------

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> dict:
        """ShardedTensors split like the base (TP axis) or replicated; fc1's gated halves as the base's."""
        from megatron.core import parallel_state
        from megatron.core.transformer.utils import (
            ensure_metadata_has_dp_cp_group,
            make_sharded_tensors_for_checkpoint,
        )

        metadata = ensure_metadata_has_dp_cp_group(metadata)
        state = self.state_dict(prefix="", keep_vars=True)
        if self.kind == "column":
            axes = {"linear_out.weight": 0, "weight_magnitude": 0}
        else:
            axes = {"linear_in.weight": 1}
        sharded = make_sharded_tensors_for_checkpoint(
            state,
            prefix,
            {k: v for k, v in axes.items() if k in state},
            sharded_offsets,
            tp_group=parallel_state.get_tensor_model_parallel_group(),
            dp_cp_group=metadata["dp_cp_group"],
        )
        for name in ("linear_out.weight", "weight_magnitude"):
            key = f"{prefix}{name}"
            if key in sharded and self.gated:
                sharded[key] = _swiglu_factory(sharded[key], sharded_offsets, metadata)
            elif key in sharded and self.row_blocks:
                sharded[key] = _split_factory()(
                    sharded[key], [n for _, n in self.row_blocks], [b for b, _ in self.row_blocks], 0
                )
        return sharded


def _split_factory() -> Any:
    # Megatron-Core's factory that stores a local tensor's row blocks as separate sharded tensors (what its
    # Mamba mixer and Gated DeltaNet do with in_proj): 0.19 in ssm.utils, 0.16.1 in ssm.mamba_mixer.
    try:
        from megatron.core.ssm.utils import _split_tensor_factory
    except ImportError:
        from megatron.core.ssm.mamba_mixer import _split_tensor_factory
    return _split_tensor_factory


def _swiglu_factory(sharded_tensor: Any, sharded_offsets: tuple, metadata: dict) -> Any:
    # Each rank holds [its gate rows; its up rows], as linear_fc1 does: the checkpoint stores gate and
    # up halves separately so that another TP size reads them back right (Megatron-Core's MLP does this).

    from megatron.core import parallel_state
    from megatron.core.transformer.mlp import apply_swiglu_sharded_factory

    kwargs = {}
    if "tp_group" in inspect.signature(apply_swiglu_sharded_factory).parameters:  # 0.19
        kwargs = dict(
            tp_group=parallel_state.get_tensor_model_parallel_group(), dp_group=metadata["dp_cp_group"]
        )
    singleton = metadata.get("singleton_local_shards", False)
    return apply_swiglu_sharded_factory(sharded_tensor, sharded_offsets, singleton, **kwargs)


class AdapterHook:
    """Forward hook on a base linear: hands its input and output to the adapter (an object holding
    the adapter, not a closure, so the hooks of a model can be told apart and inspected)."""

    def __init__(self, adapter: ParallelAdapter):
        self.adapter = adapter
        self.enabled = True  # False: the base's output unchanged (bridge.peft.adapters_disabled)

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        if not self.enabled:
            return output
        x = args[0] if args else kwargs.get("input_", kwargs.get("input"))
        return self.adapter.adapt(module, x, output)


@contextlib.contextmanager
def adapters_disabled(chunks: list) -> Iterator[None]:
    """Every adapter of the model chunks switched off inside the block: the frozen base model (DPO's
    reference under PEFT, with no second copy of the weights)."""
    hooks = [
        hook
        for chunk in chunks
        for module in chunk.modules()
        for hook in module._forward_hooks.values()
        if isinstance(hook, AdapterHook)
    ]
    for hook in hooks:
        hook.enabled = False
    try:
        yield
    finally:
        for hook in hooks:
            hook.enabled = True
