"""The driver's generation loop: requests from the HTTP thread batched together, one token per step.

The HTTP server (another thread of the driver rank) submits a `Job`; the loop on the driver's main thread
takes waiting jobs into the running batch between steps (continuous batching, at most `max_batch_size`
rows), runs one step of all of them on the Engine (so every TP / PP rank computes it), and hands each job
its new token through the job's asyncio queue. A job whose client went away (`cancel()`) leaves the batch
at the next step, which frees its slot. Bounds: at most `max_waiting` jobs wait (more are refused), and the
loop wakes at least every `idle_wait_s` to notice a shutdown.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass, field

from bridge.inference.decode import Row, step
from bridge.inference.engine import Engine
from bridge.parallel.cpu_backend import on_this_thread


class QueueFull(RuntimeError):
    pass


@dataclass(eq=False)
class Job:
    row: Row
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)  # ("token", id) ... then ("done", reason)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()

    def _emit(self, event: tuple) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)


class Scheduler:
    def __init__(
        self, engine: Engine, max_batch_size: int = 16, max_waiting: int = 256, idle_wait_s: float = 0.05
    ):
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.max_waiting = max_waiting
        self.idle_wait_s = idle_wait_s
        self._waiting: collections.deque[Job] = collections.deque()
        self._lock = threading.Condition()
        self._shutdown = threading.Event()
        self.active = 0  # rows in the running batch (read by /health)
        self.steps = 0
        self.cancelled = 0  # jobs dropped from the batch because their client went away

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, job: Job) -> None:
        with self._lock:
            if len(self._waiting) >= self.max_waiting:
                raise QueueFull(f"{len(self._waiting)} requests are waiting already")
            self._waiting.append(job)
            self._lock.notify()

    def shutdown(self) -> None:
        self._shutdown.set()
        with self._lock:
            self._lock.notify()

    def run(self) -> None:
        """The loop (the driver's main thread, or a test's thread with one rank); returns after shutdown()."""
        with on_this_thread():  # without CUDA, Megatron-Core's "cuda" calls need the CPU mode on this thread
            self._loop()

    def _loop(self) -> None:
        batch: list[Job] = []
        while not self._shutdown.is_set():
            with self._lock:
                if not batch and not self._waiting:
                    self._lock.wait(self.idle_wait_s)
                while self._waiting and len(batch) < self.max_batch_size:
                    batch.append(self._waiting.popleft())
            for job in [j for j in batch if j.cancelled.is_set()]:
                self.cancelled += 1
                job._emit(("done", "cancelled"))
            batch = [j for j in batch if not j.cancelled.is_set()]
            self.active = len(batch)
            if not batch:
                continue
            try:
                tokens = step(self.engine, [j.row for j in batch])
            except Exception as err:  # a failed step fails its requests, not the server
                for job in batch:
                    job._emit(("error", str(err)))
                batch = []
                continue
            self.steps += 1
            for job, token in zip(batch, tokens, strict=True):
                job._emit(("token", token))
                if job.row.finish_reason is not None:
                    job._emit(("done", job.row.finish_reason))
            batch = [j for j in batch if j.row.finish_reason is None]
            self.active = len(batch)
        for job in batch + list(self._waiting):
            job._emit(("error", "the server is shutting down"))
