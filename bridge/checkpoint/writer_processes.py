"""The processes forked or spawned beside a rank: the writers Megatron-Core's torch_dist save forks for
each save (filesystem_async.write_preloaded_data_multiproc), the spawned multiprocessing Manager that
serves its results queue (created at the first save, kept for the process's life), and the DataLoader's
workers (forked when the data iterators are built, once the reaper is installed).

Two rules hold for them:
- they die with their rank (PR_SET_PDEATHSIG SIGKILL), so a killed rank leaves no process behind;
- they never end by a signal that asks a run to stop. Those signals reach every process of a rank's
  process group (torchrun sends them with killpg, a terminal's Ctrl-C reaches the foreground group),
  and the rank handles them by finishing the step in flight and saving. A writer or queue server that
  died of them broke that very save (BrokenPipeError in global_results_queue.put); a DataLoader worker
  that died of them crashed its rank (torch's SIGCHLD check). The forked ones block these signals (a
  mask outlives the handlers torch's DataLoader worker installs), the queue server ignores them. The
  rank decides when they end; the parent-death signal makes sure they do.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterable
from multiprocessing.managers import SyncManager

from bridge.parallel.parent_death import die_with_parent

# every signal torchrun forwards (--signals-to-handle: SIGTERM, SIGINT, SIGHUP, SIGQUIT by default) and
# the usual train.exit_signal choices: helpers are forked before the training loop knows its own
_HELPER_STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)
# the signals the training loop handles as "stop after this step", while it runs (any other
# train.exit_signal is added to the helper set for the processes forked meanwhile)
_stop_signals: set[int] = set()
_reaper_installed = False
_results_manager = None


def set_stop_signals(signums: Iterable[int]) -> None:
    """The signals the rank now handles itself (empty: none); processes it forks from now on block
    them too."""
    _stop_signals.clear()
    _stop_signals.update(int(s) for s in signums)


def stop_signals() -> frozenset[int]:
    return frozenset(_stop_signals)


def _forked_child(parent: int) -> None:
    die_with_parent(parent)


def install_writer_reaper() -> None:
    """Every process forked from this one (checkpoint writers, data workers) dies with it, and blocks
    the stop signals."""
    global _reaper_installed
    if _reaper_installed or not hasattr(os, "register_at_fork"):
        return
    _reaper_installed = True
    state: dict = {"pid": os.getpid(), "mask": None}

    # The forking thread blocks the signals for the fork and the child inherits that mask, so a signal
    # that reaches a child before it first runs (torchrun's killpg right after a DataLoader forked its
    # workers) waits instead of killing it; the parent's mask comes back at once (a signal sent to it
    # meanwhile is delivered then).
    def before() -> None:
        state["pid"] = os.getpid()
        state["mask"] = signal.pthread_sigmask(signal.SIG_BLOCK, {*_HELPER_STOP_SIGNALS, *_stop_signals})

    def after_in_parent() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, state["mask"])

    os.register_at_fork(
        before=before, after_in_parent=after_in_parent, after_in_child=lambda: _forked_child(state["pid"])
    )


def _queue_server_init(parent: int) -> None:
    die_with_parent(parent)
    for signum in _HELPER_STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def install_results_queue() -> None:
    """Megatron-Core's torch_dist writer collects results through a queue served by a *spawned*
    multiprocessing Manager (one per process, created at the first save). Spawned processes run none
    of the at-fork hooks: a rank killed with -9 left that server running forever (holding the
    launcher's stdout), and a SIGTERM to the process group killed it under the save in flight. Bridge
    creates the same queue first, from a Manager whose server dies with its rank and ignores stop
    signals."""
    global _results_manager
    if _results_manager is not None:
        return

    try:
        from megatron.core.dist_checkpointing.strategies import filesystem_async as fa
    except ImportError:  # pragma: no cover
        return
    if getattr(fa, "_results_queue", "absent") is not None:
        return  # already created by Megatron-Core (or a release without it)
    manager = SyncManager(ctx=multiprocessing.get_context("spawn"))
    # The server starts with the stop signals blocked (exec keeps the mask) until its initializer ignores
    # them: a save made because of a stop request (scancel: SIGTERM to the step, then torchrun's agent
    # killpg's its workers) otherwise loses the server to that killpg while Python starts it.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELPER_STOP_SIGNALS)
    try:
        manager.start(initializer=_queue_server_init, initargs=(os.getpid(),))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    fa._results_queue = manager.Queue()
    _results_manager = manager
