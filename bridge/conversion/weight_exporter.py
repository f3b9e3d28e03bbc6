"""Megatron model chunks -> Hugging Face tensors, gathered across TP / PP / EP one parameter at a time.

All ranks first agree on one global list of parameters (who holds each, which HF tensors it becomes,
their shapes and dtypes). Then, parameter by parameter: the holders all-gather the TP shards, cut
them into HF tensors with the same pieces the loader uses, and the owner sends the result to whoever
needs it. At most one parameter's HF tensors are alive at a time. With TP=1, tensors that one piece
covers entirely are views of the parameter (no copy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bridge.conversion.hf_io import DTYPE_NAMES, DTYPES
from bridge.conversion.model_params import OUTPUT, LocalParam, local_params
from bridge.conversion.registry import Family
from bridge.parallel.wrappers import unwrap


@dataclass(frozen=True)
class Unit:
    """One Megatron parameter as all ranks see it."""

    name: str
    hf: tuple[tuple[str, tuple[int, ...], str], ...]  # (hf name, shape, safetensors dtype)
    holders: tuple[int, ...]  # global ranks holding it

    @property
    def owner(self) -> int:
        return self.holders[0]


def _dist():
    return dist if dist.is_available() and dist.is_initialized() else None


def _group_for(lp: LocalParam, expert: bool):
    from megatron.core import parallel_state as ps

    return ps.get_expert_tensor_parallel_group() if expert else ps.get_tensor_model_parallel_group()


class Exporter:
    """`params`: export these LocalParams instead of the chunks' own (e.g. PEFT adapter tensors under
    their HF names). `local_tensor(lp)`: the local tensor exported for `lp` (default: the parameter
    itself; e.g. a merged copy); called on every holder of that parameter at the same time."""

    def __init__(
        self,
        chunks: list[torch.nn.Module],
        family: Family,
        hf_vocab_size: int,
        dtype_for: callable,
        params: Iterable[LocalParam] | None = None,
        local_tensor: Callable[[LocalParam], torch.Tensor] | None = None,
    ):
        self.family = family
        self.local_tensor = local_tensor
        tied = getattr(unwrap(chunks[0]), "share_embeddings_and_output_weights", False)
        self.local: dict[str, LocalParam] = {}
        for lp in local_params(chunks, family, hf_vocab_size) if params is None else params:
            if tied and lp.name == OUTPUT:
                continue  # the embedding is exported once, from the first stage
            self.local[lp.name] = lp
        mine = []
        for name, lp in self.local.items():
            hf = tuple(
                (n, tuple(s), DTYPE_NAMES[dtype_for(n, lp.param.dtype)]) for n, s in lp.hf_shapes().items()
            )
            mine.append((name, hf))
        # Receive buffers live where the parameters do (NCCL moves CUDA tensors only).
        self.device = next(iter(self.local.values())).param.device if self.local else torch.device("cpu")
        dist = _dist()
        self.rank = dist.get_rank() if dist else 0
        self.world = dist.get_world_size() if dist else 1
        gathered = [mine]
        if self.world > 1:
            gathered = [None] * self.world
            dist.all_gather_object(gathered, mine)
        units: dict[str, Unit] = {}
        for rank, entries in enumerate(gathered):
            for name, hf in entries:
                if name in units:
                    units[name] = Unit(name, units[name].hf, units[name].holders + (rank,))
                else:
                    units[name] = Unit(name, hf, (rank,))
        self.units = list(units.values())

    def hf_tensors(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        return [(n, s, DTYPES[d]) for u in self.units for n, s, d in u.hf]

    def _convert(self, unit: Unit) -> dict[str, torch.Tensor]:
        lp = self.local[unit.name]
        local = lp.param.detach() if self.local_tensor is None else self.local_tensor(lp)
        if lp.size > 1:
            group = _group_for(lp, lp.rule.is_expert)
            shards = [torch.empty_like(local) for _ in range(lp.size)]
            _dist().all_gather([_bytes(s) for s in shards], _bytes(local.contiguous()), group=group)
        else:
            shards = [local]
        out: dict[str, torch.Tensor] = {}
        by_name: dict[str, list] = {}
        for r in range(lp.size):
            for piece in lp.pieces(r):
                if piece.hf_name is not None:
                    by_name.setdefault(piece.hf_name, []).append((shards[r], piece))
        for name, shape, dtype in unit.hf:
            target = DTYPES[dtype]
            parts = by_name[name]
            view = parts[0][0][parts[0][1].dst] if len(parts) == 1 else None
            if view is not None and tuple(view.shape) == shape:
                out[name] = view.to(target)  # no copy when the dtype already matches
                continue
            full = torch.empty(shape, dtype=target, device=local.device)
            for shard, piece in parts:
                full[piece.src].copy_(shard[piece.dst])
            out[name] = full
        return out

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self.iterate(dst=None)

    def iterate(self, dst: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield (hf_name, tensor) on every rank (dst=None) or only on rank `dst`."""
        dist = _dist()
        for unit in self.units:
            tensors = self._convert(unit) if self.rank in unit.holders else None
            if self.world == 1:
                yield from tensors.items()
                continue
            for name, shape, dtype in unit.hf:
                if dst is None and len(unit.holders) < self.world:
                    # Other holders (data-parallel replicas) receive into a scratch buffer, never
                    # into a view of their own parameter.
                    if self.rank == unit.owner:
                        buf = tensors[name].contiguous()
                    else:
                        buf = torch.empty(shape, dtype=DTYPES[dtype], device=self.device)
                    _broadcast(dist, buf, unit.owner)
                    yield name, (tensors[name] if tensors is not None else buf)
                elif dst is not None and dst not in unit.holders:
                    if self.rank == unit.owner:
                        _send(dist, tensors[name].contiguous(), dst)
                    elif self.rank == dst:
                        buf = torch.empty(shape, dtype=DTYPES[dtype], device=self.device)
                        _recv(dist, buf, unit.owner)
                        yield name, buf
                elif tensors is not None and (dst is None or self.rank == dst):
                    yield name, tensors[name]


# gloo does not reduce every dtype; moving raw bytes works for all of them.
def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def _broadcast(dist, t: torch.Tensor, src: int) -> None:
    dist.broadcast(_bytes(t), src=src)


def _send(dist, t: torch.Tensor, dst: int) -> None:
    dist.send(_bytes(t), dst=dst)


def _recv(dist, t: torch.Tensor, src: int) -> None:
    dist.recv(_bytes(t), src=src)
