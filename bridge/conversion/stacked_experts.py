"""Hugging Face checkpoints that stack every expert of a layer in one tensor.

Some checkpoints hold a layer's experts as one tensor with the expert first, e.g. `gate_up_proj`
[experts, hidden, 2 * ffn] with gate and up columns interleaved, instead of one tensor per expert
and projection. A family declares how its per-expert names (the ones its mapping rows use, e.g.
`...experts.{expert}.gate_proj.weight`) are cut out of the stacked tensors (`STACKED_EXPERTS` in its
mapping.py, rows of `StackedView`); the rest of the conversion sees only per-expert tensors:

- import reads through `StackedCheckpoint`, which serves a per-expert tensor as a view of the stacked
  one (`stacked[expert]`'s columns start::step or its block `start`, transposed when the view says so);
- export goes through `StackedExporter`, which puts each per-expert tensor back in place in its
  stacked tensor and hands the stacked tensor on once every expert's parts are in.

The same view is used both ways, so the round trip is exact. Peak memory: one stacked tensor (the
largest HF tensor of such a checkpoint) plus one expert.

Two layouts of one checkpoint kind: a family whose transformers model holds the stacked tensors with their
last two dims swapped against the published checkpoints that its views describe (`Family.
stacked_transposed_in_model`: Qwen3-VL-MoE, whose `save_pretrained` writes the model's layout) may be
stored either way. transformers' loader takes a tensor as its model holds it when the shapes say so, else
transposes it (`Transpose(1, 2, check_dims=True)`); bridge decides each stacked tensor by the same rule
(`stored_as_model`: against the shapes the Megatron model needs on import, the source checkpoint's recorded
shapes on export) and writes back the layout it read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import torch

from bridge.conversion.hf_io import HFCheckpoint, TensorInfo
from bridge.conversion.mappings import StackedView
from bridge.errors import ConfigError


class StackedNames:
    """Resolves per-expert names to (view, stacked name, expert index) for one family's views."""

    def __init__(self, views: tuple[StackedView, ...]):
        self.views = tuple((v, _pattern(v.virtual)) for v in views)

    def resolve(self, name: str) -> tuple[StackedView, str, int] | None:
        for view, pattern in self.views:
            m = pattern.fullmatch(name)
            if m is not None:
                return view, view.stacked.format(layer=m["layer"]), int(m["expert"])
        return None

    def views_of(self, stacked: str) -> int:
        """How many per-expert tensors each expert contributes to a stacked tensor named `stacked`."""
        return sum(1 for view, _ in self.views if _matches_stacked(view, stacked))


def _pattern(template: str) -> re.Pattern:
    """`template`'s {layer} / {expert} as named groups of digits."""
    regex = (
        re.escape(template)
        .replace(r"\{layer\}", r"(?P<layer>\d+)")
        .replace(r"\{expert\}", r"(?P<expert>\d+)")
    )
    return re.compile(regex)


def _matches_stacked(view: StackedView, stacked: str) -> bool:
    return _pattern(view.stacked).fullmatch(stacked) is not None


def _swapped(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with its last two dims swapped."""
    return (*shape[:-2], shape[-1], shape[-2])


def stored_as_model(stored: tuple[int, ...], published: tuple[int, ...]) -> bool:
    """Whether a stacked tensor of shape `stored` whose views' (published) layout would be `published` is
    stored as the transformers model holds it (the last two dims swapped): transformers' rule, which takes
    the model's layout whenever the shape fits it (so a square tensor reads as the model holds it)."""
    return tuple(stored) == _swapped(tuple(published))


class StackedCheckpoint:
    """An HFCheckpoint whose stacked expert tensors appear as the per-expert tensors they hold
    (`tensors`, `names`, `shape`, `dtype`, `read`); every other tensor is the checkpoint's own."""

    def __init__(self, ckpt, views: tuple[StackedView, ...], transposed_in_model: bool = False):
        self.ckpt = ckpt
        self.folder = ckpt.folder
        self.transposed_in_model = transposed_in_model
        self._virtual: dict[str, tuple[StackedView, str, int]] = {}
        self._stacked_views: dict[str, list[StackedView]] = {}
        self._as_model: set[str] = set()  # stacked tensors stored as the transformers model holds them
        self.tensors: dict = {}
        for name, info in ckpt.tensors.items():
            stacked_views = [v for v in views if _matches_stacked(v, name)]
            if not stacked_views:
                self.tensors[name] = info
                continue
            self._stacked_views[name] = stacked_views
            self._serve(name)

    def _serve(self, stacked: str) -> None:
        """List the per-expert tensors of `stacked` in its current orientation."""
        info = self.ckpt.tensors[stacked]
        inner = tuple(info.shape[1:])
        if stacked in self._as_model:
            inner = _swapped(inner)
        views = self._stacked_views[stacked]
        layer = _layer_of(views[0], stacked)
        for view in views:
            for expert in range(info.shape[0]):
                virtual = view.virtual.format(layer=layer, expert=expert)
                self._virtual[virtual] = (view, stacked, expert)
                self.tensors[virtual] = TensorInfo(info.file, info.dtype, view.virtual_shape(inner))

    def orient(self, needed: dict[str, tuple[int, ...]]) -> None:
        """Decide each stacked tensor's layout from the per-expert shapes the model `needed` (HF name ->
        shape; a family whose transformers model transposes them, else nothing to decide)."""
        if not self.transposed_in_model:
            return
        decided: set[str] = set()
        for name, shape in needed.items():
            hit = self._virtual.get(name)
            if hit is None or hit[1] in decided:
                continue  # not a per-expert tensor, or its stacked tensor decided already
            view, stacked, _ = hit
            decided.add(stacked)
            if stored_as_model(tuple(self.ckpt.tensors[stacked].shape[1:]), view.expert_shape(tuple(shape))):
                self._as_model.add(stacked)
                self._serve(stacked)

    @property
    def names(self) -> list[str]:
        return list(self.tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name].shape

    def dtype(self, name: str) -> torch.dtype:
        return self.ckpt.dtype(self._virtual[name][1] if name in self._virtual else name)

    def read(self, name: str, index: tuple[slice, ...]) -> torch.Tensor:
        if name not in self._virtual:
            return self.ckpt.read(name, index)
        view, stacked, expert = self._virtual[name]
        rest = (slice(None),) * (len(self.ckpt.shape(stacked)) - 1)
        expert_tensor = self.ckpt.read(stacked, (slice(expert, expert + 1), *rest))[0]
        if stacked in self._as_model:
            expert_tensor = expert_tensor.transpose(-1, -2)
        part = view.cut(expert_tensor)
        return part[index] if index else part

    def copy_into(self, name: str, index: tuple[slice, ...], dst: torch.Tensor) -> None:
        if name not in self._virtual:
            self.ckpt.copy_into(name, index, dst)
        else:
            dst.copy_(self.read(name, index))

    def close(self) -> None:
        self.ckpt.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _layer_of(view: StackedView, stacked: str) -> str:
    return _pattern(view.stacked).fullmatch(stacked)["layer"]


class StackedExporter:
    """A weight_exporter.Exporter whose per-expert tensors of stacked views come out stacked."""

    def __init__(
        self,
        exporter,
        views: tuple[StackedView, ...],
        transposed_in_model: bool = False,
        source_shapes: dict[str, tuple[int, ...]] | None = None,
    ):
        """`source_shapes`: the source checkpoint's stacked tensor shapes, whose layout is written back
        (a family whose transformers model transposes them; else, or without a source, the views' own)."""
        self.exporter = exporter
        self.names = StackedNames(views)
        self._stacked: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        self._parts: dict[str, int] = {}  # per-expert tensors each stacked tensor is made of
        self._as_model: set[str] = set()  # written as the transformers model holds them (as the source)
        experts: dict[str, set[int]] = {}
        for name, shape, dtype in exporter.hf_tensors():
            hit = self.names.resolve(name)
            if hit is None:
                continue
            view, stacked, expert = hit
            experts.setdefault(stacked, set()).add(expert)
            inner = view.expert_shape(tuple(shape))
            known = self._stacked.get(stacked)
            if known is not None and known[0][1:] != inner:
                raise ConfigError(
                    f"export of {stacked!r}: its per-expert parts disagree on the shape "
                    f"({list(known[0][1:])} vs {list(inner)}); the mapping's stacked views do not match"
                )
            self._stacked[stacked] = ((0, *inner), dtype)
        for stacked, seen in experts.items():
            if seen != set(range(len(seen))):
                raise ConfigError(
                    f"export of {stacked!r}: experts {sorted(seen)} are not 0..{len(seen) - 1}; "
                    "the model holds another expert count than the checkpoint"
                )
            (_, *inner), dtype = self._stacked[stacked]
            shape = (len(seen), *inner)
            source = (source_shapes or {}).get(stacked)
            if transposed_in_model and source is not None and stored_as_model(tuple(source), shape):
                self._as_model.add(stacked)
                shape = tuple(source)
            self._stacked[stacked] = (shape, dtype)
            self._parts[stacked] = len(seen) * self.names.views_of(stacked)

    def stacked_name(self, name: str) -> str:
        """The HF tensor (as written) that HF name `name` ends up in."""
        hit = self.names.resolve(name)
        return name if hit is None else hit[1]

    def hf_tensors(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        out, done = [], set()
        for name, shape, dtype in self.exporter.hf_tensors():
            stacked = self.stacked_name(name)
            if stacked == name:
                out.append((name, shape, dtype))
            elif stacked not in done:
                done.add(stacked)
                out.append((stacked, *self._stacked[stacked]))
        return out

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self.iterate(dst=None)

    def iterate(self, dst: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        buffers: dict[str, torch.Tensor] = {}
        filled: dict[str, int] = {}
        for name, tensor in self.exporter.iterate(dst=dst):
            hit = self.names.resolve(name)
            if hit is None:
                yield name, tensor
                continue
            view, stacked, expert = hit
            if stacked not in buffers:
                shape, dtype = self._stacked[stacked]
                buffers[stacked] = torch.empty(shape, dtype=dtype, device=tensor.device)
                filled[stacked] = 0
            part = buffers[stacked][expert]
            if stacked in self._as_model:
                part = part.transpose(-1, -2)  # the views' layout, over the buffer's memory
            target = part[..., view.columns(part.shape[-1])]
            target.copy_(tensor.transpose(-1, -2) if view.transpose else tensor)
            filled[stacked] += 1
            if filled[stacked] == self._parts[stacked]:
                yield stacked, buffers.pop(stacked)
        if buffers:
            raise ConfigError(
                f"export ended with stacked expert tensors incomplete: {sorted(buffers)[:3]}; "
                "the model is missing experts"
            )


def open_checkpoint(folder, family):
    """The HF checkpoint at `folder` as `family`'s mapping rows name its tensors."""
    ckpt = HFCheckpoint(folder)
    if not family.stacked_experts:
        return ckpt
    return StackedCheckpoint(ckpt, family.stacked_experts, family.stacked_transposed_in_model)


def stacked_exporter(exporter, family, source_shapes: dict[str, tuple[int, ...]] | None = None):
    """`exporter` writing `family`'s stacked expert tensors stacked (itself when there are none), in the
    layout of the source checkpoint's (`source_shapes`) where the family's model may hold another."""
    if not family.stacked_experts:
        return exporter
    return StackedExporter(
        exporter, family.stacked_experts, family.stacked_transposed_in_model, source_shapes
    )


def written_name(family, name: str) -> str:
    """The HF tensor an exported tensor `name` of `family` is written in (its stacked tensor, or itself)."""
    hit = StackedNames(family.stacked_experts).resolve(name) if family.stacked_experts else None
    return name if hit is None else hit[1]
