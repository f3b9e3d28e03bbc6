"""Publishing files and folders atomically: readers see nothing or the complete result.

The one home of this for checkpoints (the tracker file) and conversion (HF folders, imported
checkpoints). Pure Python; torch.distributed only through bridge.parallel.ranks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from bridge.errors import ConfigError
from bridge.parallel import ranks


def check_target_dir(path: str | os.PathLike, field: str = "path") -> Path:
    """A conversion target must not exist or be an empty folder: never overwrite someone's files."""
    p = Path(path)
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise ConfigError(
            f"{field}={str(p)!r} exists and is not an empty folder; conversion never "
            "overwrites files: pick a new folder or remove this one"
        )
    return p


def fsync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to a sibling temporary file, fsync it, os.replace it onto `path`, fsync the folder."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def remove_dead_stagings(target: Path) -> list[Path]:
    """Remove `.<name>.tmp-<pid>` staging folders of `target` whose process is gone.

    A killed conversion cannot clean up after itself; the next conversion to the same target does.
    Folders of a live process (another conversion writing right now) are kept."""
    removed = []
    for staging in target.parent.glob(f".{target.name}.tmp-*"):
        pid = staging.name.rsplit("tmp-", 1)[1]
        if staging.is_dir() and pid.isdigit() and not _process_alive(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)
            removed.append(staging)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, field: str = "path", *, all_ranks: bool = False) -> Iterator[Path]:
    """Yield a hidden staging folder next to `path`; rename it onto `path` only if the block succeeds.

    `path` must not exist or be empty (check_target_dir). With all_ranks=True every rank enters the
    block and writes into the same staging folder: rank 0 creates it, renames it once every rank has
    left the block (barriers around), and removes it on failure. Otherwise the calling process alone
    does everything (e.g. rank 0 writing an HF folder).
    """
    target = check_target_dir(path, field)
    writer = not all_ranks or ranks.rank() == 0
    suffix = "partial" if all_ranks else f"tmp-{os.getpid()}"  # all ranks must agree on the name
    staging = target.parent / f".{target.name}.{suffix}"
    if writer:
        target.parent.mkdir(parents=True, exist_ok=True)
        if staging.exists():
            shutil.rmtree(staging)
        remove_dead_stagings(target)
        staging.mkdir()
    if all_ranks:
        ranks.barrier()
    try:
        yield staging
        if all_ranks:
            ranks.barrier()  # every rank has finished writing
        if writer:
            check_target_dir(target, field)  # nobody filled it meanwhile
            if target.exists():
                target.rmdir()
            os.replace(staging, target)
        if all_ranks:
            ranks.barrier()
    finally:
        if writer and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
