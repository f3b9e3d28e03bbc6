"""Before the first iteration: take the save directory's lock, clean what interrupted saves left, and
check that the directory is writable and has room for one checkpoint. Every failure is one ConfigError,
the same on every rank (run_recipe.py: `error: ...`, exit 2).

Also installs the writer reaper (bridge.checkpoint.writer_processes): the processes Megatron-Core's
torch_dist save starts die with their rank.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bridge.checkpoint.disk_full import gib
from bridge.checkpoint.lock import DirLock
from bridge.checkpoint.overwrite import apply_overwrite
from bridge.checkpoint.paths import clean_leftovers
from bridge.checkpoint.writer_processes import install_writer_reaper
from bridge.errors import ConfigError
from bridge.parallel.param_count import count_parameters


def checkpoint_bytes(plan) -> tuple[int, str]:
    """Estimated size of one checkpoint of this run (all ranks together), and how it was estimated."""
    n = count_parameters(plan.provider.model_shape()).total
    cfg = plan.config
    weight = 4 if plan.precision.name == "fp32" else 2
    per = weight
    if cfg.checkpoint.save_optim:
        # fp32 main params + moments (muon: Adam's two on some parameters, counted on all: an upper bound)
        per += 4 + (4 if cfg.optimizer.optimizer == "sgd" else 8)
    return n * per, f"{n / 1e6:.1f} M parameters x {per} bytes"


def _check_writable(root: Path) -> None:
    probe = root / f".bridge-write-test-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise ConfigError(
            f"checkpoint.save = {str(root)!r}: cannot write there ({err.strerror or err}). Fix: give a "
            "writable directory, or checkpoint.save=null to not save"
        ) from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


@dataclass
class SaveDirGuard:
    root: Path | None = None
    lock: DirLock | None = None
    notes: list[str] = field(default_factory=list)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def _rank0_prepare(
    root: Path, need: int, how: str, job: str | None = None, overwrite: bool = False
) -> tuple[str | None, DirLock | None, list[str]]:
    """(error, lock, notes) on rank 0: the other ranks get the error through a broadcast."""
    try:
        _check_writable(root)
        lock = DirLock(root, job=job)
        note = lock.acquire()
        notes = [note] if note else []
        try:
            notes += clean_leftovers(root)
            if overwrite:
                notes.append(apply_overwrite(root))
            free = shutil.disk_usage(root).free
            if free < need:
                raise ConfigError(
                    f"checkpoint.save = {str(root)!r}: {gib(free)} free, but one checkpoint of this "
                    f"run needs about {gib(need)} ({how}). Fix: free space, or save elsewhere"
                )
        except BaseException:
            lock.release()
            raise
        return None, lock, notes
    except ConfigError as err:
        return str(err), None, []


def prepare_save_dir(plan) -> SaveDirGuard:
    """All ranks, after distributed init and before resuming. No-op without checkpoint.save."""
    install_writer_reaper()
    save = plan.config.checkpoint.save
    if not save:
        return SaveDirGuard()
    import torch.distributed as dist

    root = Path(save)
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    error, lock, notes = (None, None, [])
    if rank0:
        need, how = checkpoint_bytes(plan)
        c = plan.config.checkpoint
        # checkpoint.overwrite applies to this run when it does not resume (bridge.checkpoint.overwrite)
        overwrite = (
            bool(c.overwrite) and not c.load and getattr(plan.resume, "source", None) != "checkpoint.save"
        )
        error, lock, notes = _rank0_prepare(root, need, how, plan.environment.scheduler_job, overwrite)
    if dist.is_initialized() and dist.get_world_size() > 1:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise ConfigError(error)
    return SaveDirGuard(root=root, lock=lock, notes=notes)
