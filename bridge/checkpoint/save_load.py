"""Saving and loading checkpoints in Megatron-Core's dist_checkpointing `torch_dist` format.

A save is written under a temporary name and published by a rename, then the tracker is replaced
atomically by rank 0, so a crash at any point of a save leaves the previous complete checkpoint
tracked; a load checks the folder against its integrity manifest first. Model weights are saved as
global ShardedTensors, so a checkpoint loads under any TP/PP layout; the distributed optimizer's state
reshards over DP (dp_reshardable) or any layout (fully_reshardable), the RNG state is tied to the
saving layout. `optimizer=None` on both sides is the model-only path (HF import/export, pretrained
weights).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bridge.checkpoint import compat, foreign, fsdp2_state, manifest, state, writer_processes
from bridge.checkpoint.async_writes import AsyncSaves, PendingWrite, async_save_kwargs
from bridge.checkpoint.atomic import fsync_dir
from bridge.checkpoint.disk_full import abandon_save
from bridge.checkpoint.foreign_load import load_foreign
from bridge.checkpoint.in_place_merge import merge_in_place
from bridge.checkpoint.integrity import check_folder as _check_folder  # (tests import it from here)
from bridge.checkpoint.paths import (
    RUN_CONFIG_FILENAME,
    checkpoint_candidates,
    checkpoint_dir,
    remove_old_checkpoints,
    replaced_dir,
    resolve_checkpoint,
    staging_dir,
    tracker_problem,
    write_tracker,
)
from bridge.checkpoint.save_state import (  # noqa: F401 - MODEL_PARTS, model_sharded_state_dict: re-exported
    MODEL_PARTS,
    checkpoint_state_dict,
    load_part,
    model_keys,
    model_sharded_state_dict,
    save_strategy,
)
from bridge.errors import ConfigError
from bridge.models.adapter_marks import has_adapters
from bridge.parallel import ranks
from bridge.parallel.wrappers import unwrap_all

# Called on every rank after the shards of a checkpoint are written and before the tracker moves.
# Tests use it to simulate a crash in the middle of a save.
AFTER_SHARDS_WRITTEN_HOOKS: list[Callable[[Path, int], None]] = []
# Called on every rank (rank 0 only for "published" / "tracked") as hook(stage, folder, iteration) at
# each stage of a save: staging_created, shards_written, manifest_written, published, tracked, done.
# The fault suite kills processes at these points.
SAVE_STAGE_HOOKS: list[Callable[[str, Path, int], None]] = []


def _stage(stage: str, target: Path, iteration: int) -> None:
    for hook in SAVE_STAGE_HOOKS:
        hook(stage, target, iteration)


def save_checkpoint(
    root: str | os.PathLike,
    iteration: int,
    model_chunks: list,
    optimizer=None,
    scheduler=None,
    *,
    train_state: dict | None = None,
    run_config_yaml: str | None = None,
    save_rng: bool = True,
    most_recent_k: int = -1,
    summary: dict | None = None,
    consolidated: Callable[[Path], None] | None = None,
    fully_parallel: bool = False,
    sharded_strategy: Any = None,
    async_saves: AsyncSaves | None = None,
    optimizer_format: str = "dp_reshardable",
) -> Path:
    """Save a complete checkpoint for `iteration` on all ranks, publish it, then move the tracker.

    Every rank writes into `<root>/.iter_N.saving`; once all have finished, the integrity manifest
    (bridge.checkpoint.manifest) is written into it and rank 0 renames it onto `iter_N`, then points
    the tracker at it, then applies `most_recent_k` (complete checkpoints only). A crash at any point
    leaves the previous complete checkpoint tracked and loadable. A complete `iter_N` already there
    (tracked or not: a retrain after a fallback from a damaged one, a resume from an older step) is
    never rewritten in place: it is moved aside and removed only after the new one is published.
    Callers that may save a state already on disk keep it instead (same_state.holds_same_state, as
    bridge.training.saves does). A failed write removes the staging folder; a full disk is one
    ConfigError naming the directory, the free and the needed space (disk_full).
    `consolidated(staging)`, called on every rank after the shards are written, adds the Hugging Face
    copy (checkpoint.save_consolidated) inside the folder, so that it is published with it.
    `fully_parallel` (checkpoint.fully_parallel_save): the tensors every data-parallel (and context-
    parallel) replica holds are written by one of them each, spread evenly, instead of all by the first.
    `sharded_strategy`: a Megatron-Core save strategy used instead of the default (e.g. the streaming
    import's, bridge.conversion.streaming, which writes tensors it reads from elsewhere).
    `async_saves` (checkpoint.async_save): the shards are written by a forked writer while the caller
    goes on; the manifest, the rename and the tracker follow once every rank's write has finished
    (bridge.checkpoint.async_writes). A write still in flight is waited for first. Returns the folder
    the checkpoint is (or will be) published as. `optimizer_format` (state.OPTIMIZER_FORMATS): how the
    distributed optimizer's state is laid out, `fully_reshardable` to resume under any TP / PP / DP.
    """
    if async_saves is not None:
        async_saves.wait()  # one write in flight at a time, published in order
    # forked writers and the spawned results-queue server die with this rank and ignore stop signals
    writer_processes.install_writer_reaper()
    if not getattr(sharded_strategy, "writes_in_process", False):  # direct_save's needs no queue server
        writer_processes.install_results_queue()
    root = Path(root)
    target = checkpoint_dir(root, iteration)
    staging = staging_dir(root, iteration)
    if ranks.is_rank_zero():
        root.mkdir(parents=True, exist_ok=True)
        if staging.exists():  # leftovers of an interrupted save of the same iteration
            shutil.rmtree(staging)
        staging.mkdir()
    ranks.barrier()
    try:
        request = _write_staging(
            staging, iteration, model_chunks, optimizer, scheduler, train_state, run_config_yaml, save_rng,
            summary, consolidated, fully_parallel, sharded_strategy, async_saves is not None, optimizer_format,
        )  # fmt: skip
    except BaseException as err:  # torch DCP's CheckpointException is a BaseException
        abandon_save(root, staging, iteration, err)
        raise

    def publish() -> None:  # async: a failure here is AsyncSaves' to report (abandon_save)
        if request is not None:  # the async write has finished on every rank
            _finish_staging(staging, iteration, summary)
        _publish(root, staging, target, iteration, most_recent_k)

    if request is None:
        publish()
    else:
        async_saves.schedule(request, PendingWrite(root, staging, target, iteration, publish))
        _stage("write_started", staging, iteration)
    return target


def _publish(root: Path, staging: Path, target: Path, iteration: int, most_recent_k: int) -> None:
    """Every rank, once the staging folder is complete: rank 0 renames it onto iter_N, then moves the
    tracker, then applies the retention."""
    ranks.barrier()
    _stage("manifest_written", staging, iteration)
    if ranks.is_rank_zero():
        aside = replaced_dir(root, iteration)
        if target.exists():  # an earlier complete checkpoint of this iteration, or a partial folder
            if aside.exists():
                shutil.rmtree(aside)
            os.replace(target, aside)
        os.replace(staging, target)
        fsync_dir(root)
        _stage("published", target, iteration)
        write_tracker(root, iteration)
        _stage("tracked", target, iteration)
        if aside.exists():
            shutil.rmtree(aside, ignore_errors=True)
        if most_recent_k and most_recent_k > 0:
            remove_old_checkpoints(root, keep=most_recent_k, newest=iteration)
    ranks.barrier()
    _stage("done", target, iteration)


def _write_staging(
    staging: Path,
    iteration: int,
    model_chunks: list,
    optimizer,
    scheduler,
    train_state: dict | None,
    run_config_yaml: str | None,
    save_rng: bool,
    summary: dict | None,
    consolidated: Callable[[Path], None] | None,
    fully_parallel: bool,
    sharded_strategy: Any,
    asynchronous: bool = False,
    optimizer_format: str = "dp_reshardable",
) -> Any:
    """Every rank: the shards, the consolidated copy, run_config.yaml and the manifest, into `staging`.
    `asynchronous`: the shards are left to the returned Megatron-Core AsyncRequest, and the manifest
    to _finish_staging once they are written; otherwise None is returned and the folder is complete."""
    from megatron.core import dist_checkpointing

    _stage("staging_created", staging, iteration)
    sd, fsdp2 = checkpoint_state_dict(
        iteration, model_chunks, optimizer, scheduler, train_state, save_rng, optimizer_format
    )
    strategy = (
        sharded_strategy if sharded_strategy is not None else save_strategy(fully_parallel and not fsdp2)
    )
    if asynchronous and strategy is None:
        from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy

        strategy = get_default_save_sharded_strategy()
    extra = async_save_kwargs() if asynchronous else {}
    request = dist_checkpointing.save(sd, str(staging), sharded_strategy=strategy, **extra)
    if fsdp2:
        fsdp2_state.save(staging, model_chunks, optimizer)
    if consolidated is not None:
        consolidated(staging)
    if ranks.is_rank_zero() and run_config_yaml is not None:
        (staging / RUN_CONFIG_FILENAME).write_text(run_config_yaml)
    if ranks.is_rank_zero():  # Megatron-Bridge's per-iteration train state (bridge.checkpoint.foreign)
        foreign.write_train_state(staging, {"iteration": iteration, **(train_state or {})})
    if request is None:
        # a strategy that checksummed what it wrote (direct_save's) spares the manifest a read of it
        _finish_staging(staging, iteration, summary, getattr(strategy, "written_checksums", None))
    return request


def _finish_staging(
    staging: Path, iteration: int, summary: dict | None, known: dict[str, tuple[int, str]] | None = None
) -> None:
    """Every rank, once every rank's shards are in `staging`: the test hooks, then the manifest."""
    ranks.barrier()
    for hook in AFTER_SHARDS_WRITTEN_HOOKS:
        hook(staging, iteration)
    _stage("shards_written", staging, iteration)
    manifest.write_manifest(staging, {"iteration": int(iteration), **(summary or {})}, known)


class CheckpointDamaged(ConfigError):
    """A checkpoint that cannot be loaded as it is on disk (what is wrong is in the message)."""


def _gather(value: Any) -> list:
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return [value]
    parts: list = [None] * dist.get_world_size()
    dist.all_gather_object(parts, value)
    return parts


def _agree(problems: list[str]) -> list[str]:
    """Every rank gets the union of all ranks' problems (so all take the same decision)."""
    seen: list[str] = []
    for part in _gather(problems):
        for p in part or []:
            if p not in seen:
                seen.append(p)
    return seen


def load_checkpoint(
    path: str | os.PathLike,
    model_chunks: list,
    optimizer=None,
    scheduler=None,
    *,
    iteration: int | None = None,
    load_rng: bool = True,
    strict: bool = True,
    model_config: Any = None,
    fallback: bool = False,
    verify: bool = True,
    on_fallback: Callable[[str], None] | None = None,
    lr_from_config: bool = False,
) -> dict:
    """Load into the model chunks (and optimizer / scheduler / RNG when given); returns train_state
    plus "checkpoint_dir" (the folder loaded).

    `path` is a root (its tracker's checkpoint, or `iteration`'s) or an iter_* directory. The folder is
    first checked against its manifest (sizes and checksums, `verify`); a damaged one is a
    CheckpointDamaged naming what is wrong, or, with `fallback` and a root's tracker choice, a call
    to `on_fallback(message)` and a load of the previous complete checkpoint. `lr_from_config`: keep
    the optimizer's current max_lr / min_lr (scheduler.override_opt_param_scheduler).

    Model weights reshard to the current TP/PP layout; optimizer and RNG state need the saving layout.
    Before anything is read, the checkpoint is checked against the model (bridge.checkpoint.compat):
    tensor names and global shapes, tied embeddings, and (from the run_config.yaml next to it) the RoPE
    settings; `model_config` (the run's GPTModelProvider or a dict of its fields) adds the fields a
    built model does not record. A mismatch is a ConfigError on every rank.
    """
    candidates, may_fall_back = checkpoint_candidates(path, iteration)
    if not candidates:
        resolve_checkpoint(path, iteration)  # raises the "holds no complete checkpoint" error
    bad_tracker = tracker_problem(path) if may_fall_back else None
    if bad_tracker is not None:  # the candidates start at the newest complete checkpoint
        if not fallback:
            raise CheckpointDamaged(
                f"{bad_tracker}. Fix: set checkpoint.fallback_to_previous=true to load the newest complete "
                f"checkpoint ({candidates[0][0]}), or fix or delete the file"
            )
        if on_fallback is not None:
            on_fallback(f"{bad_tracker}; loading the newest complete checkpoint {candidates[0][0]} instead")
    # One process reads each shard once, checksumming it as it goes (bridge.checkpoint.direct_load);
    # ranks check their shares before the load, so that all of them take the same decision.
    data_later = verify and not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
    failures = []
    for i, (target, _) in enumerate(candidates):
        problems = _agree(_check_folder(target, verify, data_later))
        if not problems:
            try:
                return _load_one(
                    target, model_chunks, optimizer, scheduler, load_rng, strict, model_config, lr_from_config,
                    data_later,
                )  # fmt: skip
            except CheckpointDamaged as err:
                problems = [str(err)]
        what = f"checkpoint {target} is damaged: {'; '.join(problems)}"
        failures.append(what)
        if not (fallback and may_fall_back) or i + 1 == len(candidates):
            break
        if on_fallback is not None:
            on_fallback(f"{what}; loading the previous complete checkpoint {candidates[i + 1][0]} instead")
    previous = candidates[len(failures)][0] if may_fall_back and len(failures) < len(candidates) else None
    # conversion and generation load with no fallback setting: name the folder that a path can point at
    hint = (
        "no older complete checkpoint is left"
        if fallback and may_fall_back or may_fall_back and previous is None
        else f"load the previous complete checkpoint {previous} by giving that folder as the path "
        "(checkpoint.load, or --megatron-path to convert or generate); a training run loads it itself "
        "with checkpoint.fallback_to_previous=true"
        if may_fall_back
        else "point the path (checkpoint.load / checkpoint.ckpt_step, or --megatron-path) at another checkpoint"
    )
    raise CheckpointDamaged(f"{' | '.join(failures)}. Fix: {hint}, or restore the files")


def verified_for_model(path: str | os.PathLike, model_chunks: list, verify: bool = True) -> Path:
    """The checkpoint folder at `path` after load_checkpoint's checks (manifest, tensors vs the model),
    for readers that load its tensors themselves (bridge.conversion.streaming)."""
    target, _ = resolve_checkpoint(path)
    problems = _check_folder(target, verify)
    if problems:
        raise CheckpointDamaged(f"checkpoint {target} is damaged: {'; '.join(problems)}")
    sd = model_sharded_state_dict(model_chunks, "all")
    compat.check_compatible(target, unwrap_all(model_chunks), sd, None, strict=True)
    return target


def _load_one(
    target: Path,
    model_chunks,
    optimizer,
    scheduler,
    load_rng,
    strict,
    model_config,
    lr_from_config=False,
    verify_data=False,
) -> dict:
    """Load the checked folder `target`; `verify_data`: check the data files' checksums (which
    _check_folder left to the read) right after the read, before the loaded state is used."""
    from megatron.core import dist_checkpointing

    from bridge.checkpoint.direct_load import DirectLoadStrategy

    try:
        content = read_common(target)
    except Exception as err:  # noqa: BLE001 - a pickle of any kind of garbage
        raise CheckpointDamaged(f"common.pt cannot be read ({type(err).__name__}: {err})") from err

    # the data files' checksums that _check_folder left to the read; a mismatch is the same
    # CheckpointDamaged as before a load (the caller falls back or fails)
    def check_data(read: dict[str, tuple[int, int]]) -> None:
        problems = manifest.verify_data(target, read) if verify_data else []
        if problems:
            raise CheckpointDamaged("; ".join(problems))

    if "checkpoint_content" not in content and (theirs := foreign.describe(target, content)) is not None:
        check_data({})
        return load_foreign(theirs, model_chunks, optimizer, scheduler, strict, model_config, lr_from_config)
    has_optim = content.get("checkpoint_content", {}).get("optimizer", False)
    has_rng = content.get("checkpoint_content", {}).get("rng", False)
    saved_adapters_only = content.get("checkpoint_content", {}).get("adapters_only", False)
    saved_fsdp2 = content.get("checkpoint_content", {}).get("fsdp2")
    if (saved_fsdp2 is not None) != fsdp2_state.is_fsdp2(model_chunks):
        saved_by = (
            "strategy fsdp2 (torch DCP shards)" if saved_fsdp2 is not None else "Megatron-Core's torch_dist"
        )
        raise ConfigError(
            f"checkpoint {target} holds {saved_by} state and this run's model is "
            f"{'not ' if saved_fsdp2 is not None else ''}an fsdp2 one: a checkpoint resumes under the strategy "
            "that saved it. Use that distributed.strategy, or start from the checkpoint's weights "
            "(checkpoint.pretrained_checkpoint: its consolidated Hugging Face copy for fsdp2, the "
            "checkpoint itself for torch_dist)"
        )

    chunks = unwrap_all(model_chunks)
    with_adapters = has_adapters(chunks)
    if saved_adapters_only and not with_adapters:
        raise ConfigError(
            f"checkpoint {target} holds PEFT adapters only (its run trained adapters on frozen weights): "
            "load it into a model with the same peft settings (peft.scheme, target_modules, dim) and "
            "checkpoint.pretrained_checkpoint set to its base, or export it with convert_checkpoint.py export"
        )
    if optimizer is not None and not has_optim:
        raise ConfigError(
            f"checkpoint {target} has no optimizer state: load it as "
            "checkpoint.pretrained_checkpoint (weights only) or set checkpoint.load_optim=False"
        )
    if saved_fsdp2 is not None:
        check_data({})
        return _load_fsdp2(target, content, model_chunks, optimizer, scheduler, load_rng and has_rng)
    # adapters-only checkpoint -> the adapters; a full (e.g. pretrained) one into a PEFT model -> the base
    part = "adapters" if saved_adapters_only else "base" if with_adapters else "all"
    sd = model_sharded_state_dict(model_chunks, part)
    compat.check_compatible(target, chunks, sd, model_config, strict=strict)
    merge_in_place(sd)  # the gated MLP halves are read into the parameters; no merged copy
    if optimizer is not None:
        state.ensure_optimizer_state(optimizer)
        # the format it was saved in (checkpoints from before the choice: dp_reshardable)
        saved_format = content.get("checkpoint_content", {}).get("optimizer_format") or "dp_reshardable"
        metadata = state.optimizer_metadata(saved_format)
        sd["optimizer"] = optimizer.sharded_state_dict(sd, is_loading=True, metadata=metadata)
    rng = load_rng and has_rng
    if rng:
        sd["rng_state"] = state.rng_sharded_object(None)
    # each saved tensor read straight into the parameter (no torch.load copy first: bridge.checkpoint.direct_load)
    strategy = DirectLoadStrategy(checksum=verify_data)
    loaded = dist_checkpointing.load(sd, str(target), sharded_strategy=strategy)
    # before the loaded state is used (a fallback's load overwrites the weights read in place)
    check_data(strategy.checksums)

    with torch.no_grad():  # the optimizer copies into views of the parameters
        for chunk, key in zip(chunks, model_keys(len(chunks)), strict=True):
            load_part(chunk, loaded[key], part, strict)
        if optimizer is not None:
            if lr_from_config:
                state.use_current_lr(optimizer, loaded["optimizer"])
            reshardable = saved_format == "fully_reshardable"
            with state.adam_steps_kept(optimizer) if reshardable else contextlib.nullcontext():
                optimizer.load_state_dict(loaded["optimizer"])
            state.restore_adam_steps(optimizer, loaded["optimizer"])
    if scheduler is not None and "opt_param_scheduler" in loaded:
        scheduler.load_state_dict(loaded["opt_param_scheduler"])
    if rng:
        state.set_rng_state(loaded["rng_state"])
    return {**dict(loaded.get("train_state", {})), "checkpoint_dir": str(target)}


def _load_fsdp2(target: Path, content: dict, model_chunks, optimizer, scheduler, rng: bool) -> dict:
    """An fsdp2 checkpoint: DCP tensors resharded onto this run's mesh, then the common state."""
    from megatron.core import dist_checkpointing

    fsdp2_state.check_model_parallel_sizes(
        target, content["checkpoint_content"]["fsdp2"], fsdp2_state.current_sizes(model_chunks)
    )
    fsdp2_state.load(target, model_chunks, optimizer)
    sd: dict = {"rng_state": state.rng_sharded_object(None)} if rng else {}
    loaded = dist_checkpointing.load(sd, str(target)) if rng else content
    if scheduler is not None and "opt_param_scheduler" in content:
        scheduler.load_state_dict(content["opt_param_scheduler"])
    if rng:
        state.set_rng_state(loaded["rng_state"])
    return {**dict(content.get("train_state", {})), "checkpoint_dir": str(target)}


def read_common(target: Path) -> dict:
    from megatron.core.dist_checkpointing.serialization import load_common_state_dict

    return load_common_state_dict(str(target))


def is_fsdp2_checkpoint(path: str | os.PathLike, iteration: int | None = None) -> bool:
    """Whether the checkpoint at `path` was saved by strategy fsdp2 (torch DCP tensors)."""
    target, _ = resolve_checkpoint(path, iteration)
    return read_common(target).get("checkpoint_content", {}).get("fsdp2") is not None


def saved_layout(path: str | os.PathLike, iteration: int | None = None) -> str | None:
    """The layout line (TP=.. PP=..) a checkpoint was saved with, if recorded."""
    target, _ = resolve_checkpoint(path, iteration)
    return read_common(target).get("train_state", {}).get("layout")


def saved_optimizer_format(path: str | os.PathLike, iteration: int | None = None) -> str | None:
    """The distributed optimizer's format in a checkpoint (state.OPTIMIZER_FORMATS): `dp_reshardable`
    for one saved before the choice existed, None when it holds no such state (none, or fsdp2's)."""
    target, _ = resolve_checkpoint(path, iteration)
    content = read_common(target).get("checkpoint_content", {})
    if not content.get("optimizer") or content.get("fsdp2") is not None:
        return None
    return content.get("optimizer_format") or "dp_reshardable"
