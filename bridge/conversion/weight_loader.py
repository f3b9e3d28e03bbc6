"""Load Hugging Face safetensors into this rank's Megatron model chunks, slice by slice.

Everything is checked before the first weight is copied: every parameter has a mapping, every HF
tensor it needs exists with the implied shape, and (across all ranks) every tensor in the checkpoint
is used by some parameter. Then each piece is copied into the parameter, read from the file straight
into it where the piece is whole rows, else from the memory-mapped file (bridge.conversion.hf_io.copy_into):
one copy per byte, no full-model staging; each copied piece is checked for NaN / Inf with one
min/max pass in its own dtype (counted exactly only when one is found), on a second thread while
the next piece is copied.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from bridge.conversion.hf_io import HFCheckpoint
from bridge.conversion.model_params import OUTPUT, LocalParam, local_params
from bridge.conversion.progress import progress_bar
from bridge.conversion.registry import Family
from bridge.conversion.stacked_experts import StackedCheckpoint
from bridge.conversion.unmapped import check_copies, copies, log_left_out, unmapped_error
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
    if isinstance(ckpt, StackedCheckpoint) and ckpt.transposed_in_model:  # which layout its experts are in
        ckpt.orient({hf_name: shape for lp in params for hf_name, shape in lp.hf_shapes().items()})
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
    omit_unmapped: bool = False,
    left_out: frozenset[str] = frozenset(),
) -> list[str]:
    """Copy the checkpoint into `chunks` (this rank's model chunks, wrapped or not); returns the names of
    the checkpoint tensors left out of the model (bridge.conversion.unmapped: logged, never silent).

    A checkpoint tensor no parameter maps is a ConfigError naming them unless `omit_unmapped`.
    `left_out`: the MTP layers' tensors of a model built with fewer `mtp_num_layers` than the checkpoint.

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
    omitted = check_all_used(chunks, ckpt, family, used_everywhere, omit_unmapped, left_out)

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
    return omitted


def copy_pieces(lp: LocalParam, data: torch.Tensor, ckpt: HFCheckpoint) -> Iterator[tuple[torch.Tensor, str]]:
    """Fill `data` (`lp`'s local tensor) from the checkpoint piece by piece (vocab padding rows zeroed);
    yields each copied piece and its HF tensor's name, for the caller's finiteness check."""
    for piece in lp.pieces():
        if piece.hf_name is None:
            data[piece.dst].zero_()  # vocab padding rows
            continue
        dst = data[piece.dst]
        ckpt.copy_into(piece.hf_name, piece.src, dst)
        yield dst, piece.hf_name


def check_tensors(params: list[LocalParam], ckpt: HFCheckpoint) -> set[str]:
    """The HF tensors `params` need (ConfigError for a missing or mis-shaped one), in one process."""
    used, error = _plan(params, ckpt)
    if error:
        raise ConfigError(error)
    return used


def check_all_used(
    chunks,
    ckpt: HFCheckpoint,
    family: Family,
    used: set[str],
    omit_unmapped: bool = False,
    left_out: frozenset[str] = frozenset(),
) -> list[str]:
    """ConfigError when the checkpoint holds tensors no parameter uses (`used`: by any rank), unless
    `omit_unmapped`; returns what is left out (logged with every name)."""
    names = set(ckpt.tensors)
    aliases = {a: m for a, m in copies(chunks, family, names).items() if m in used}
    check_copies(ckpt, aliases, _tied_head(chunks, family))
    out = sorted(left_out & names)
    log_left_out(
        ckpt.folder, out, "the model is built with fewer model.mtp_num_layers than the checkpoint holds"
    )
    unexpected = sorted(names - used - set(aliases) - left_out)
    if unexpected and not omit_unmapped:
        raise unmapped_error(ckpt.folder, unexpected, family)
    log_left_out(ckpt.folder, unexpected, "omit_unmapped=True")
    return sorted(out + unexpected)


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


def _tied_head(chunks, family: Family) -> str | None:
    # A tied checkpoint may still carry lm_head (equal to the embedding): accepted, not loaded, not compared.
    model = unwrap(chunks[0])
    out = family.resolve(OUTPUT)
    if not getattr(model, "share_embeddings_and_output_weights", False) or out is None:
        return None
    return out[1].hf[0]
