"""Leave a command-line process: without the interpreter's final garbage collections, or at once after an
error in a distributed run."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import traceback


def skip_final_collections() -> None:
    """Call last, just before a command-line entry point exits.

    At shutdown Python runs full garbage collections over everything still alive: with torch and
    Megatron-Core imported that is ~280,000 objects. In the conversion's export process the time from the
    end of its work to the exit was 1.2 s, and 0.4 s with this call, for memory the OS takes back anyway. gc.freeze() puts the live objects out of the collector's reach; reference counting
    still frees them, files still close and atexit handlers still run. Not for library code: an
    application that goes on after a conversion keeps its collector."""
    gc.freeze()


def _distributed():
    """torch.distributed when this process is in a process group, else None (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def exit_if_distributed(error: BaseException) -> None:
    """In a rank of a distributed run (a process group exists), leave after `error` at once: the
    traceback, the process groups aborted, exit status 1. Elsewhere return (the caller re-raises).

    Not the interpreter's normal exit: that one runs the destructors of everything the traceback kept
    alive (FSDP2 state, CUDA streams and events, NCCL communicators, data-loader workers) and joins the
    process groups' threads, and a rank seen hanging there after an error (fsdp2 on one GPU) kept the
    launch waiting until it was killed. Aborting the groups (non-blocking, unlike destroy) lets this rank
    and the ones waiting on it in a collective fail instead of wait; the launcher (torchrun, bridge run)
    sees exit status 1 and stops the others. The checkpoint writers' helper processes die with their rank
    (bridge.parallel.parent_death)."""
    dist = _distributed()
    if dist is None:
        return
    traceback.print_exception(error)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing more can be said
            stream.flush()
    with contextlib.suppress(Exception):  # best effort: the exit below happens either way
        dist.distributed_c10d._abort_process_group()
    os._exit(1)
