"""A process that must not outlive its parent asks the kernel for a signal when the parent dies
(Linux's prctl(PR_SET_PDEATHSIG)); elsewhere this is a no-op.

Used for the helper processes of a rank (checkpoint writers, the writer's results-queue server: SIGKILL
when their rank dies) and for a rank launched by torchrun (SIGTERM when torchrun dies, so a launcher
killed by a repeated signal leaves ranks that save and exit instead of training on unsupervised).
"""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def signal_on_parent_death(signum: int, parent: int | None = None) -> bool:
    """Ask for `signum` when this process's parent dies. `parent`: the pid the parent had before the
    call (the pid read after it tells whether the parent died in between). Returns False when the
    parent is already gone (the caller decides what to do), True otherwise (also where prctl is
    missing: nothing can be done there)."""
    expected = os.getppid() if parent is None else parent
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return True
    return os.getppid() == expected


def die_with_parent(parent: int) -> None:
    """SIGKILL when the parent (pid `parent`, read before this process started) dies; exits at once
    when it already has."""
    if not signal_on_parent_death(signal.SIGKILL, parent):
        os._exit(1)


def launched_by_torchrun() -> bool:
    """torchrun (torch.distributed.elastic) sets TORCHELASTIC_RUN_ID in every worker's environment."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID"))
