"""Load Hugging Face safetensors into this rank's Megatron model chunks, slice by slice.

Everything is checked before the first weight is copied: every parameter has a mapping, every HF
tensor it needs exists with the implied shape, and (across all ranks) every tensor in the checkpoint
is used by some parameter. Then each piece is copied from the memory-mapped file straight into the
parameter: one copy per byte, no full-model staging; each copied piece is checked for NaN / Inf with one
min/max pass in its own dtype (counted exactly only when one is found), on a second thread while
the next piece is copied.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from bridge.conversion.hf_io import HFCheckpoint
from bridge.conversion.model_params import EMBEDDING, OUTPUT, LocalParam, local_params
from bridge.conversion.progress import progress_bar
from bridge.conversion.registry import Family
from bridge.errors import ConfigError
from bridge.parallel import ranks
from bridge.parallel.runtime import quiet_known_warnings
from bridge.parallel.wrappers import unwrap

quiet_known_warnings()  # before conversion first imports Megatron-Core (some of its warnings fire on import)


def _gather_objects(obj):
    rank, world = ranks.rank_world()
    if world == 1:
        return [obj]

    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _plan(params: list[LocalParam], ckpt: HFCheckpoint) -> tuple[set[str], str | None]:
    used: set[str] = set()
    for lp in params:
        for hf_name, shape in lp.hf_shapes().items():
            if hf_name not in ckpt.tensors:
                return used, (
                    f"checkpoint {ckpt.folder} is missing tensor {hf_name!r} (needed by Megatron "
                    f"parameter {lp.name}); the checkpoint is incomplete or of another architecture"
                )
            if ckpt.shape(hf_name) != shape:
                return used, (
                    f"tensor {hf_name!r} in {ckpt.folder} has shape {list(ckpt.shape(hf_name))} but "
                    f"the model built from config.json needs {list(shape)} (for {lp.name}); "
                    "config.json and the weights disagree"
                )
            used.add(hf_name)
    return used, None


def load_hf_weights(
    chunks: list[torch.nn.Module],
    ckpt: HFCheckpoint,
    family: Family,
    hf_vocab_size: int,
    progress: bool = True,
    allow_non_finite: bool = False,
    dropped: frozenset[str] = frozenset(),
) -> None:
    """Copy the checkpoint into `chunks` (this rank's model chunks, wrapped or not).

    `dropped`: checkpoint tensors the conversion leaves out on purpose (layers the Megatron model does
    not build, e.g. multi-token prediction layers, warned about when the config is read: the family's
    `dropped_hf_tensors` hook); any other unused tensor is an error.

    A NaN or Inf in a copied tensor is a ConfigError naming the tensor and its file (on every rank,
    after the copy) unless allow_non_finite.
    """
    try:
        params = list(local_params(chunks, family, hf_vocab_size))
        used, error = _plan(params, ckpt)
    except ConfigError as e:  # keep the other ranks from hanging in the gather below
        params, used, error = [], set(), str(e)
    results = _gather_objects((sorted(used), error))
    errors = [e for _, e in results if e]
    if errors:
        raise ConfigError(errors[0])
    used_everywhere = set().union(*(set(u) for u, _ in results))
    check_all_used(chunks, ckpt, family, used_everywhere, dropped)

    rank, _ = ranks.rank_world()
    bar = progress_bar(len(params), "loading HF weights", "param", enabled=progress and rank == 0)
    # The finiteness check of each piece runs on a second thread while the next piece is copied
    # (both release the GIL): the import costs its copies, not copies + a second pass over the model.
    checks = []
    with torch.no_grad(), ThreadPoolExecutor(max_workers=1) as checker:
        for lp in params:
            for dst, hf_name in copy_pieces(lp, lp.param.data, ckpt):
                if not allow_non_finite:
                    checks.append(checker.submit(non_finite, dst, hf_name, ckpt))
            bar.update(1)
        bad = next((msg for msg in (c.result() for c in checks) if msg), None)
    bar.close()
    ckpt.close()
    bad_everywhere = [b for b in _gather_objects(bad) if b]  # every rank raises together
    if bad_everywhere:
        raise ConfigError(bad_everywhere[0])


def copy_pieces(lp: LocalParam, data: torch.Tensor, ckpt: HFCheckpoint) -> Iterator[tuple[torch.Tensor, str]]:
    """Fill `data` (`lp`'s local tensor) from the checkpoint piece by piece (vocab padding rows zeroed);
    yields each copied piece and its HF tensor's name, for the caller's finiteness check."""
    for piece in lp.pieces():
        if piece.hf_name is None:
            data[piece.dst].zero_()  # vocab padding rows
            continue
        dst = data[piece.dst]
        dst.copy_(ckpt.read(piece.hf_name, piece.src))
        yield dst, piece.hf_name


def check_tensors(params: list[LocalParam], ckpt: HFCheckpoint) -> set[str]:
    """The HF tensors `params` need (ConfigError for a missing or mis-shaped one), in one process."""
    used, error = _plan(params, ckpt)
    if error:
        raise ConfigError(error)
    return used


def check_all_used(
    chunks, ckpt: HFCheckpoint, family: Family, used: set[str], dropped: frozenset[str]
) -> None:
    """ConfigError when the checkpoint holds tensors no parameter uses (`used`: by any rank)."""
    unexpected = sorted(set(ckpt.tensors) - used - _tied_lm_head(chunks, family) - dropped)
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (" ..." if len(unexpected) > 5 else "")
        raise ConfigError(
            f"checkpoint {ckpt.folder} has {len(unexpected)} tensor(s) the model does not use: {shown}; "
            "config.json does not describe these weights (wrong architecture, or extra modules)"
        )


def non_finite(t: torch.Tensor, hf_name: str, ckpt: HFCheckpoint) -> str | None:
    """The error for a tensor holding NaN or Inf, else None (one min/max pass when it is finite)."""
    if not t.is_floating_point() or t.numel() == 0:
        return None
    low, high = torch.aminmax(t)  # NaN propagates into both, +Inf is the max, -Inf the min
    if torch.isfinite(low) and torch.isfinite(high):
        return None
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    return (
        f"tensor {hf_name!r} in {ckpt.folder / ckpt.tensors[hf_name].file} holds {nan} NaN and {inf} Inf "
        "values; the checkpoint is damaged or comes from a diverged run. Fix: convert a good checkpoint, "
        "or pass allow_non_finite=True (convert_checkpoint.py import --allow-non-finite) to import it anyway"
    )


def _tied_lm_head(chunks, family: Family) -> set[str]:
    # Some tied checkpoints still carry lm_head (equal to the embedding): accepted, not loaded.

    model = unwrap(chunks[0])
    if not getattr(model, "share_embeddings_and_output_weights", False):
        return set()
    out = family.resolve(OUTPUT)
    emb = family.resolve(EMBEDDING)
    if out is None or emb is None:
        return set()
    return set(out[1].hf) - set(emb[1].hf)
