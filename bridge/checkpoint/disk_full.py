"""A save that fails for lack of space: one error naming the directory, the free and the needed space.

Megatron-Core's writer reports a full disk in many shapes (OSError ENOSPC, or a torch serialization
RuntimeError such as "unexpected pos 704 vs 598"); the errno anywhere in the exception chain, or almost
no space left where the save was being written, or less free space than one checkpoint takes, says
which failures are a full disk. Pure Python (torch.distributed only to agree across ranks).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from bridge.checkpoint.paths import checkpoint_dir, complete_iterations
from bridge.errors import ConfigError

# below this much free space right after a failed write, the disk is taken as full
NEARLY_FULL_BYTES = 1 << 20


def human_size(n: float) -> str:
    """Bytes in the largest unit that keeps a number >= 1 (so a small disk does not read 0.00 GiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} bytes"


def gib(n: float) -> str:
    """Bytes in GiB with enough digits that a small disk never reads 0.00 GiB (e.g. 0.00195 GiB)."""
    x = n / 2**30
    return f"{x:.2f} GiB" if x >= 1 or x == 0 else f"{x:.3g} GiB"


def folder_bytes(folder: str | os.PathLike) -> int:
    total = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _has_enospc(err: BaseException | None) -> bool:
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def is_disk_full(root: Path, err: BaseException, written: int = 0, need: int | None = None) -> bool:
    """Whether a save into `root` that failed with `err` failed for lack of space. Call before the
    unfinished save (`written` bytes so far) is removed. `need`: bytes of the newest complete
    checkpoint: when the free space and what was written do not add up to it, the save could not fit
    (torch's writer loses the errno: "unexpected pos 704 vs 598")."""
    if _has_enospc(err):
        return True
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return False
    return free < NEARLY_FULL_BYTES or (need is not None and free + written < need)


def disk_full_error(
    root: Path, iteration: int, need: int | None, written: int, last: Path | None = None
) -> ConfigError:
    """The one error of a save of `iteration` that filled the disk, once its leftover is removed.
    `need`: bytes of the newest complete checkpoint (None: none exists; `written` bytes were written)."""
    try:
        free = human_size(shutil.disk_usage(root).free)
    except OSError:
        free = "unknown"
    needed = (
        f"one checkpoint of this run needs about {human_size(need)}"
        if need
        else f"the save had written {human_size(written)} when the disk filled"
    )
    return ConfigError(
        f"checkpoint.save = {str(root)!r}: no space left on the device while saving iteration {iteration} "
        f"({free} free after removing the unfinished save; {needed}); "
        + (f"the last complete checkpoint {last.name} is kept" if last else "no checkpoint was saved")
        + ". Fix: free space there or give checkpoint.save another directory, then resume"
    )


def abandon_save(root: Path, staging: Path, iteration: int, err: BaseException) -> None:
    """A save that failed on this rank with `err`: remove its staging folder (nothing was published),
    and raise the one disk-full error instead of `err` when the disk filled up."""
    done = complete_iterations(root)
    need = folder_bytes(checkpoint_dir(root, done[-1])) if done else None
    written = folder_bytes(staging) if staging.is_dir() else 0
    full = is_disk_full(root, err, written, need)
    if _raised_on_every_rank(err):  # decide together, before any rank frees the space
        full = any(_gather(full))
    shutil.rmtree(staging, ignore_errors=True)
    if full:
        last = checkpoint_dir(root, done[-1]) if done else None
        raise disk_full_error(root, iteration, need, written, last) from err


def _raised_on_every_rank(err: BaseException) -> bool:
    """Torch DCP's CheckpointException: Megatron-Core's finalize gathers every rank's write results and
    raises it on all ranks (one rank's full disk reaches the others without its errno)."""
    try:
        from torch.distributed.checkpoint.api import CheckpointException
    except ImportError:  # pragma: no cover - torch is there whenever a save runs
        return False
    return isinstance(err, CheckpointException)


def _gather(value: bool) -> list[bool]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return [value]
    parts: list = [None] * dist.get_world_size()
    dist.all_gather_object(parts, value)
    return parts
