"""Load Hugging Face safetensors into this rank's Megatron model chunks, slice by slice.

Everything is checked before the first weight is copied: every parameter has a mapping, every HF
tensor it needs exists with the implied shape, and (across all ranks) every tensor in the checkpoint
is used by some parameter. Then each piece is copied from the memory-mapped file straight into the
parameter: one copy per byte, no full-model staging.
"""

from __future__ import annotations

import torch

from bridge.conversion.hf_io import HFCheckpoint
from bridge.conversion.model_params import EMBEDDING, OUTPUT, LocalParam, local_params
from bridge.conversion.progress import progress_bar
from bridge.conversion.registry import Family
from bridge.errors import ConfigError
from bridge.parallel import ranks
from bridge.parallel.runtime import quiet_known_warnings

quiet_known_warnings()  # before conversion first imports Megatron-Core (some of its warnings fire on import)


def _gather_objects(obj):
    rank, world = ranks.rank_world()
    if world == 1:
        return [obj]
    import torch.distributed as dist

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
) -> None:
    """Copy the checkpoint into `chunks` (this rank's model chunks, wrapped or not)."""
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
    tied_lm_head = _tied_lm_head(chunks, family)
    unexpected = sorted(set(ckpt.tensors) - used_everywhere - tied_lm_head)
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (" ..." if len(unexpected) > 5 else "")
        raise ConfigError(
            f"checkpoint {ckpt.folder} has {len(unexpected)} tensor(s) the model does not use: {shown}; "
            "config.json does not describe these weights (wrong architecture, or extra modules)"
        )

    rank, _ = ranks.rank_world()
    bar = progress_bar(len(params), "loading HF weights", "param", enabled=progress and rank == 0)
    with torch.no_grad():
        for lp in params:
            data = lp.param.data
            for piece in lp.pieces():
                if piece.hf_name is None:
                    data[piece.dst].zero_()  # vocab padding rows
                else:
                    data[piece.dst].copy_(ckpt.read(piece.hf_name, piece.src))
            bar.update(1)
    bar.close()
    ckpt.close()


def _tied_lm_head(chunks, family: Family) -> set[str]:
    # Some tied checkpoints still carry lm_head (equal to the embedding): accepted, not loaded.
    from bridge.parallel.wrappers import unwrap

    model = unwrap(chunks[0])
    if not getattr(model, "share_embeddings_and_output_weights", False):
        return set()
    out = family.resolve(OUTPUT)
    emb = family.resolve(EMBEDDING)
    if out is None or emb is None:
        return set()
    return set(out[1].hf) - set(emb[1].hf)
