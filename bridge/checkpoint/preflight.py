"""Before the first iteration: take the save directory's lock, clean what interrupted saves left, and
check that the directory is writable and has room for one checkpoint. Every failure is one ConfigError,
the same on every rank (run_recipe.py: `error: ...`, exit 2).

Also installs the writer reaper: Megatron-Core's torch_dist save forks writer processes and spawns a
Manager server for its results queue; each gets PR_SET_PDEATHSIG(SIGKILL), so a rank killed during a
save takes them with it instead of leaving them running forever (install_results_queue).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bridge.checkpoint.disk_full import gib
from bridge.checkpoint.lock import DirLock
from bridge.checkpoint.paths import clean_leftovers
from bridge.errors import ConfigError

_PR_SET_PDEATHSIG = 1
_reaper_installed = False


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to do
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def install_writer_reaper() -> None:
    """Every process forked from this one (checkpoint writers, data workers) dies with it."""
    global _reaper_installed
    if _reaper_installed or not hasattr(os, "register_at_fork"):
        return
    _reaper_installed = True
    state = {"pid": os.getpid()}

    def before() -> None:
        state["pid"] = os.getpid()

    os.register_at_fork(before=before, after_in_child=lambda: _die_with_parent(state["pid"]))


_results_manager = None


def install_results_queue() -> None:
    """Megatron-Core's torch_dist writer collects results through a queue served by a *spawned*
    multiprocessing Manager (one per process, created at the first save). Spawned processes run none
    of the at-fork hooks, and a rank killed with -9 left that server running forever (holding the
    launcher's stdout). Bridge creates the same queue first, from a Manager whose server process gets
    PR_SET_PDEATHSIG in its initializer, so it dies with its rank."""
    global _results_manager
    if _results_manager is not None:
        return
    import multiprocessing
    from multiprocessing.managers import SyncManager

    try:
        from megatron.core.dist_checkpointing.strategies import filesystem_async as fa
    except ImportError:  # pragma: no cover
        return
    if getattr(fa, "_results_queue", "absent") is not None:
        return  # already created by Megatron-Core (or a release without it)
    manager = SyncManager(ctx=multiprocessing.get_context("spawn"))
    manager.start(initializer=_die_with_parent, initargs=(os.getpid(),))
    fa._results_queue = manager.Queue()
    _results_manager = manager


def checkpoint_bytes(plan) -> tuple[int, str]:
    """Estimated size of one checkpoint of this run (all ranks together), and how it was estimated."""
    from bridge.parallel.param_count import count_parameters

    n = count_parameters(plan.provider.model_shape()).total
    cfg = plan.config
    weight = 4 if plan.precision.name == "fp32" else 2
    per = weight
    if cfg.checkpoint.save_optim:
        per += 4 + (8 if cfg.optimizer.optimizer == "adam" else 4)  # fp32 main params + moments
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


def _rank0_prepare(root: Path, need: int, how: str) -> tuple[str | None, DirLock | None, list[str]]:
    """(error, lock, notes) on rank 0: the other ranks get the error through a broadcast."""
    try:
        _check_writable(root)
        lock = DirLock(root)
        note = lock.acquire()
        notes = [note] if note else []
        try:
            notes += clean_leftovers(root)
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
        error, lock, notes = _rank0_prepare(root, need, how)
    if dist.is_initialized() and dist.get_world_size() > 1:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise ConfigError(error)
    return SaveDirGuard(root=root, lock=lock, notes=notes)
