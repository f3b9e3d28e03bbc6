"""Saving from the training loop: the checkpoint of an iteration (refused when a weight is not finite),
and the messages that point at the last checkpoint whose weights were finite."""

from __future__ import annotations

import hashlib
import math
import struct
import time
from typing import TYPE_CHECKING

import torch

import bridge.checkpoint as checkpoint
from bridge.checkpoint import manifest, paths
from bridge.checkpoint.same_state import holds_same_state
from bridge.training.logging import logger
from bridge.training.state import NonFiniteLossError

if TYPE_CHECKING:
    from bridge.training.context import TrainingContext


def log_rank() -> int:
    return torch.distributed.get_world_size() - 1  # a last-pipeline-stage rank (pp is the outer dim)


def last_finite_checkpoint(save_dir: str | None) -> tuple[int, str, dict] | None:
    """The newest complete checkpoint in `save_dir` whose weights were finite when it was saved
    (from its manifest summary; a checkpoint without one counts as finite)."""
    if not save_dir:
        return None
    for it in reversed(paths.complete_iterations(save_dir)):
        folder = paths.checkpoint_dir(save_dir, it)
        summary = manifest.summary(folder)
        if summary.get("weights_finite", True):
            return it, str(folder), summary
    return None


def last_checkpoint_note(save_dir: str | None) -> str:
    found = last_finite_checkpoint(save_dir)
    if found is None:
        return (
            "no checkpoint with finite weights exists in checkpoint.save" if save_dir else "nothing was saved"
        )
    it, folder, summary = found
    size = summary.get("max_abs_weight")
    loss = summary.get("lm_loss")
    facts = ", ".join(
        x
        for x in (
            f"lm loss {loss:.4g}" if isinstance(loss, float) else "",
            f"largest |weight| {size:.3g}" if isinstance(size, float) else "",
        )
        if x
    )
    return (
        f"the last checkpoint with finite weights is iteration {it} ({folder}{': ' + facts if facts else ''})"
    )


def non_finite_message(what: str, value: float, iteration: int, ctx: TrainingContext) -> str:
    if what == "lm loss":
        stopped = "training stopped before the optimizer step could change the weights"
    else:  # Megatron-Core computes the norm inside optimizer.step(): this step was already applied
        stopped = "training stopped; the weights in memory are no longer trusted and are not saved"
    return (
        f"{what} is {value} at iteration {iteration}: {stopped}; {last_checkpoint_note(ctx.cfg.checkpoint.save)}. "
        "Lower optimizer.lr, check the data, or enable gradient clipping (optimizer.clip_grad), then resume "
        "from that checkpoint (checkpoint.ckpt_step)."
    )


def weights_summary(model: list) -> dict:
    """Whether every parameter is finite, the largest finite |weight| (over all ranks), and a
    fingerprint of the weights (a digest of every rank's per-parameter float64 sums: bit-identical
    weights under the same layout give the same one), which same_state compares before a re-save."""
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    finite, largest = True, 0.0
    sums = []
    with torch.no_grad():
        for chunk in model:
            for p in chunk.parameters():
                ok = bool(torch.isfinite(p).all())
                finite &= ok
                a = p.detach().abs()
                local = p.to_local() if hasattr(p, "to_local") else p  # fsdp2: this rank's shard
                local = local.detach()
                sums += [float(local.sum(dtype=torch.float64)), float(local.abs().sum(dtype=torch.float64))]
                if not ok:
                    a = a[torch.isfinite(a)]
                if a.numel():
                    largest = max(largest, float(a.max()))
    t = torch.tensor([0.0 if finite else 1.0, largest], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    mine = hashlib.sha256(struct.pack(f"<{len(sums)}d", *sums)).hexdigest()
    every = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(every, mine)
    return {
        "weights_finite": bool(t[0].item() == 0.0),
        "max_abs_weight": float(t[1].item()),
        "weights_fingerprint": hashlib.sha256("".join(every).encode()).hexdigest()[:32],
    }


def sync_params_for(ctx: TrainingContext):
    """With overlapped param all-gather, params are current only after the next forward's hooks run:
    force the gather before saving or evaluating, and re-arm the hooks afterwards."""

    class _Sync:
        def __enter__(self):
            if ctx.overlap_param_gather:
                for chunk in ctx.model:
                    chunk.disable_forward_pre_hook(param_sync=True)

        def __exit__(self, *exc):
            if ctx.overlap_param_gather:
                for chunk in ctx.model:
                    chunk.enable_forward_pre_hook()

    return _Sync()


def save(ctx: TrainingContext, loss: float | None = None, announce: bool = True) -> str:
    """Save the current iteration (refused, with NonFiniteLossError, when a weight is NaN/inf).
    `announce`: log the "saved checkpoint" line (a stop's save says it in the stop's one line).
    With checkpoint.async_save the shards are written by a forked writer while training goes on: the
    folder is published (and announced) later, by `finish_pending`; a write still in flight is
    finished first. The seconds this call held the loop go into `ctx.save_stalls`."""
    start = time.perf_counter()
    finish_pending(ctx, blocking=True)  # the previous write is published before this one starts
    cfg = ctx.cfg.checkpoint
    summary = weights_summary(ctx.model)
    if not summary["weights_finite"]:
        raise NonFiniteLossError(
            f"weights are not finite at iteration {ctx.state.iteration}: not saved; "
            f"{last_checkpoint_note(cfg.save)}. Lower optimizer.lr or enable gradient clipping "
            "(optimizer.clip_grad), then resume from that checkpoint."
        )
    if loss is not None and math.isfinite(loss):
        summary["lm_loss"] = float(loss)
    summary["consumed_train_samples"] = int(ctx.state.consumed_train_samples)
    target = checkpoint.checkpoint_dir(cfg.save, ctx.state.iteration)
    if target.is_dir() and holds_same_state(target, {"iteration": ctx.state.iteration, **summary}):
        if torch.distributed.get_rank() == log_rank():
            logger.info(
                "iteration %d is already saved in %s with this run's weights (checked against its "
                "manifest): kept as it is",
                ctx.state.iteration,
                target,
            )
        return str(target)
    replacing = target.is_dir()  # another state at this iteration (damaged, or other weights)
    with sync_params_for(ctx):
        path = checkpoint.save_checkpoint(
            cfg.save,
            ctx.state.iteration,
            ctx.model,
            optimizer=ctx.optimizer if cfg.save_optim else None,
            scheduler=ctx.scheduler,
            train_state=ctx.state.to_dict(),
            run_config_yaml=ctx.run_config_yaml,
            save_rng=cfg.save_rng,
            most_recent_k=cfg.most_recent_k,
            summary=summary,
            consolidated=ctx.consolidated,
            fully_parallel=cfg.fully_parallel_save,
            async_saves=ctx.async_saves,
            optimizer_format="fully_reshardable"
            if cfg.dist_ckpt_optim_fully_reshardable
            else "dp_reshardable",
        )
    ctx.save_stalls[ctx.state.iteration] = time.perf_counter() - start
    note = (
        ": it replaces the earlier checkpoint of this iteration, which held another state"
        if replacing
        else ""
    )
    if ctx.async_saves is not None and ctx.async_saves.pending is not None:
        ctx.async_saves.pending.caller_note = (announce, note)  # announced when published
    elif announce:
        _announce(ctx, ctx.state.iteration, path, note)
    return str(path)


def finish_pending(ctx: TrainingContext, blocking: bool) -> str | None:
    """checkpoint.async_save: publish the write in flight once every rank has written it (`blocking`:
    wait for it). Every rank calls it at the same points; the folder published, or None."""
    if ctx.async_saves is None or ctx.async_saves.pending is None:
        return None
    done = ctx.async_saves.wait() if blocking else ctx.async_saves.poll()
    if done is None:
        return None
    announce, note = done.caller_note or (True, "")
    if announce:
        _announce(ctx, done.iteration, done.target, note)
    return str(done.target)


def _announce(ctx: TrainingContext, iteration: int, path, note: str) -> None:
    if torch.distributed.get_rank() != log_rank():
        return
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    what = ", PEFT adapters only" if ctx.cfg.peft.scheme is not None else ""
    how = ", written asynchronously" if ctx.async_saves is not None else ""
    logger.info(
        "saved checkpoint at iteration %d to %s (%.2f MB%s%s)%s", iteration, path, size / 1e6, what, how, note
    )
