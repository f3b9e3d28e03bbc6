"""Asynchronous saves (checkpoint.async_save) on Megatron-Core's async dist-checkpoint machinery.

A save builds its sharded state dict and forks one writer process per rank (Megatron-Core's
`AsyncCallsQueue`, non-persistent: the fork is the snapshot of the tensors, so the training step may
change them at once); the step loop goes on while the writers write. When every rank's writer has
finished (one all-reduce, `poll`, once per iteration while a write is in flight), Megatron-Core's own
finalization writes the checkpoint's metadata and bridge's finalization runs on every rank: the manifest,
the rename onto `iter_N`, the tracker, retention. So a checkpoint is published only after its write
finished on every rank, and a kill at any point leaves the previous complete checkpoint tracked.

At most one write is in flight: the next save first waits for the previous one (`wait`). An exit path
either waits (a stop signal, the end of training) or abandons the write (an error: its writer is killed
and its staging folder is left to the next run's clean_leftovers).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.checkpoint.disk_full import abandon_save

logger = logging.getLogger(__name__)


@dataclass
class PendingWrite:
    """The write in flight: where it goes and what publishes it once all ranks have written."""

    root: Path
    staging: Path
    target: Path
    iteration: int
    publish: Callable[[], None]
    # the caller's own record of this save (bridge.training.saves: whether and how to announce it)
    caller_note: Any = None


def async_save_kwargs() -> dict[str, Any]:
    """What `dist_checkpointing.save` needs for an async request on the installed release: 0.19 picks
    NVIDIA Resiliency Extension's writer by default, whose queue is not the one used here, so it is asked
    for Megatron-Core's own ("mcore"); 0.16 has only that one."""
    from megatron.core import dist_checkpointing

    kwargs: dict[str, Any] = {"async_sharded_save": True}
    if "async_strategy" in inspect.signature(dist_checkpointing.save).parameters:
        kwargs["async_strategy"] = "mcore"
    return kwargs


class AsyncSaves:
    """One rank's checkpoint write in flight (at most one). Every method is called on all ranks."""

    def __init__(self) -> None:
        self._queue: Any = None
        self.pending: PendingWrite | None = None

    def _calls(self) -> Any:
        if self._queue is None:
            from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

            self._queue = AsyncCallsQueue(persistent=False)
        return self._queue

    def schedule(self, request: Any, pending: PendingWrite) -> None:
        """Start `request` (Megatron-Core's AsyncRequest) in a forked writer; `pending.publish` runs on
        every rank after Megatron-Core's finalization, once the write is complete everywhere."""
        if self.pending is not None:
            raise RuntimeError("a checkpoint write is already in flight: wait() for it first")
        request.add_finalize_fn(pending.publish)
        self.pending = pending
        try:
            self._calls().schedule_async_request(request)
        except BaseException:
            self.pending = None
            raise

    def poll(self) -> PendingWrite | None:
        """Publish the write in flight if every rank's writer has finished; the write published, or None."""
        return self._finalize(blocking=False)

    def wait(self) -> PendingWrite | None:
        """Block until the write in flight is written and published everywhere (the next save, an exit)."""
        return self._finalize(blocking=True)

    def _finalize(self, blocking: bool) -> PendingWrite | None:
        if self.pending is None:
            return None
        pending = self.pending
        try:
            done = self._calls().maybe_finalize_async_calls(blocking=blocking)
        except BaseException as err:  # a writer failed on some rank: CheckpointException on all
            self.pending = None

            abandon_save(pending.root, pending.staging, pending.iteration, err)
            raise
        if not done:
            return None
        self.pending = None
        return pending

    def abandon(self) -> None:
        """This rank stops its write in flight without publishing it (an error ends the run: the other
        ranks may not reach a collective). The staging folder stays for the next run's clean_leftovers."""
        if self.pending is None or self._queue is None:
            return
        for call in list(getattr(self._queue, "async_calls", ())):
            caller = getattr(call, "async_caller", None)
            if caller is not None:
                caller.close(abort=True)
        self._queue.async_calls.clear()
        logger.warning(
            "the checkpoint of iteration %d was still being written: abandoned (not published)",
            self.pending.iteration,
        )
        self.pending = None
