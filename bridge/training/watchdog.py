"""Hung-rank detection (ft.rank_heartbeat_timeout): a heartbeat the loop beats at each phase of a step, and a
watchdog thread per rank that stops the job when the heartbeat gets older than the timeout.

A hang of synchronous training hangs every rank: the stuck one and the ones waiting for it in a collective.
So the rank whose watchdog fires first does not name itself: the watchdogs meet in the launcher's TCPStore
(their own connection to the store of the process group). Each publishes its heartbeat (iteration and phase)
while the run goes on; on a timeout each rank still able to run Python reports where its main thread is,
in a collective or not. The stuck ranks are those that are not waiting in a collective, and those that do
not answer at all (stopped, dead, or blocked in native code that holds the interpreter); the first rank to
claim the report prints one message naming them, their iteration and last operation, and every rank exits
with HANG_EXIT_CODE, so torchrun (or the fork server) ends the job. Without a store (one rank) a rank only
reports itself.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

HANG_EXIT_CODE = 3  # torchrun reports it as the rank's exit code; 2 is a configuration error
# where the main thread waits for other ranks: torch.distributed's collectives, and Megatron-Core's DDP
# waiting on its asynchronous gradient reductions
_COLLECTIVE_PATHS = (os.path.join("torch", "distributed", ""),)
_ASYNC_WAIT_PATHS = (os.path.join("megatron", "core", "distributed", ""),)


class Heartbeat:
    """The main thread's progress: the iteration in progress and its phase, since when (time.monotonic()).
    One tuple, replaced at each beat: the watchdog thread reads it whole. Also the step's data-loading time
    (the straggler report reads it)."""

    def __init__(self, iteration: int = 0):
        self.last: tuple[int, str, float] = (iteration, "setup", time.monotonic())
        self.steps_done = 0
        self.data_seconds = 0.0  # time in the data iterators since reset_data_time()

    def beat(self, phase: str, iteration: int | None = None) -> None:
        it = self.last[0] if iteration is None else iteration
        self.last = (it, phase, time.monotonic())

    def reset_data_time(self) -> float:
        spent, self.data_seconds = self.data_seconds, 0.0
        return spent

    def wrap(self, iterator: Iterator | None) -> Iterator | None:
        return None if iterator is None else _BeatingIterator(iterator, self)


class _BeatingIterator:
    """A data iterator that beats "data" while a micro batch is read and "forward/backward" after."""

    def __init__(self, inner: Iterator, heartbeat: Heartbeat):
        self.inner, self.heartbeat = inner, heartbeat

    def __iter__(self):
        return self

    def __next__(self):
        hb = self.heartbeat
        hb.beat("data")
        start = time.perf_counter()
        try:
            return next(self.inner)
        finally:
            hb.data_seconds += time.perf_counter() - start
            hb.beat("forward/backward")


@dataclass(frozen=True)
class Report:
    """Where a rank's main thread is when the job is found hung."""

    iteration: int
    phase: str
    idle_s: float  # since its last beat
    where: str  # file:line in function, outside torch.distributed
    collective: str | None  # the collective it waits in, or None: it is not waiting for other ranks

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str | bytes) -> Report:
        return cls(**json.loads(text))


def main_thread_position() -> tuple[str, str | None]:
    """(where the main thread is, the collective it waits in or None), from its current stack."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return "unknown", None
    stack = traceback.extract_stack(frame)
    collective = None
    for f in stack:  # outermost first: the torch.distributed function the caller called
        if (
            any(p in f.filename for p in _COLLECTIVE_PATHS)
            and not f.name.startswith("_")
            and f.name != "wrapper"
        ):
            collective = f"torch.distributed.{f.name}"
            break
    last = stack[-1]  # Megatron-Core's DDP waiting on an asynchronous reduce or gather handle
    if (
        collective is None
        and any(p in last.filename for p in _ASYNC_WAIT_PATHS)
        and ".wait(" in (last.line or "")
    ):
        collective = "an asynchronous collective"
    outside = [f for f in stack if not any(p in f.filename for p in _COLLECTIVE_PATHS)]
    f = outside[-1] if outside else stack[-1]
    return f"{_short(f.filename)}:{f.lineno} in {f.name}", collective


def _short(path: str) -> str:
    for marker in ("site-packages" + os.sep, "bridge" + os.sep, "tests" + os.sep):
        if marker in path:
            return path[path.rindex(marker) + (len(marker) if marker.startswith("site") else 0) :]
    return path


def hang_message(world: int, reports: dict[int, Report], last_heard: dict[int, tuple[int, str]],
                 timeout_field: str, timeout_s: float) -> str:  # fmt: skip
    """The one message: the stuck ranks (silent, or not waiting in a collective), then the waiting ones."""
    silent = [r for r in range(world) if r not in reports]
    busy = sorted(r for r, rep in reports.items() if rep.collective is None)
    waiting = sorted(r for r, rep in reports.items() if rep.collective is not None)
    parts = []
    for r in busy:
        rep = reports[r]
        parts.append(
            f"rank {r} made no progress for {rep.idle_s:.1f} s at iteration {rep.iteration} "
            f"(last operation: {rep.phase}, at {rep.where})"
        )
    for r in silent:
        heard = last_heard.get(r)
        last = f"last heard at iteration {heard[0]} ({heard[1]})" if heard else "never heard"
        parts.append(f"rank {r} does not answer (stopped, dead, or blocked in native code; {last})")
    if not parts:  # every rank waits in a collective: they wait for one another (mismatched collectives)
        parts.append("every rank waits in a collective (ranks calling different collectives)")
    groups: dict[tuple, list[int]] = {}
    for r in waiting:
        rep = reports[r]
        groups.setdefault((rep.collective, rep.iteration, rep.phase, rep.where), []).append(r)
    waits = [
        f"rank{'s' if len(rs) > 1 else ''} {_ranks(rs)} wait{'' if len(rs) > 1 else 's'} in {c} at iteration {it} "
        f"({phase}, at {where})"
        for (c, it, phase, where), rs in groups.items()
    ]
    text = "hung rank: " + "; ".join(parts)
    if waits:
        text += "; " + "; ".join(waits)
    return f"{text}. {timeout_field}={timeout_s:g} s: stopping the job (exit code {HANG_EXIT_CODE})"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


class Watchdog:
    """The thread that checks the heartbeat every `poll_s` and stops the job on a timeout (module docstring).
    `store`: a torch.distributed Store of this job's own (a clone: the thread never shares the main
    thread's connection), or None."""

    def __init__(self, heartbeat: Heartbeat, timeout_s: float, initial_timeout_s: float, rank: int, world: int,
                 store=None, exit=os._exit):  # fmt: skip
        self.heartbeat, self.rank, self.world, self.store = heartbeat, rank, world, store
        self.timeout_s, self.initial_timeout_s = timeout_s, initial_timeout_s
        self.poll_s = min(max(min(timeout_s, initial_timeout_s) / 10, 0.1), 5.0)
        self.grace_s = 2 * self.poll_s + 1.0  # for the other ranks' reports
        self._exit = exit
        self._stop = threading.Event()
        self._published: tuple[int, str] | None = None
        self._thread = threading.Thread(target=self._run, name="bridge-hang-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 5)

    def _limit(self) -> tuple[str, float]:
        if self.heartbeat.steps_done == 0:
            return "ft.initial_rank_heartbeat_timeout", self.initial_timeout_s
        return "ft.rank_heartbeat_timeout", self.timeout_s

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            iteration, phase, at = self.heartbeat.last
            field, limit = self._limit()
            if time.monotonic() - at > limit:
                self._stop_job(field, limit, own=True)
                return
            if self.store is not None:
                try:
                    if self._published != (iteration, phase):
                        self.store.set(f"beat/{self.rank}", json.dumps([iteration, phase]))
                        self._published = (iteration, phase)
                    if self.store.check(["hang"]):  # another rank timed out: report and stop too
                        self._stop_job(field, limit, own=False)
                        return
                except Exception:  # the store is gone (the launcher ended): nothing to watch for
                    return

    def _report(self) -> Report:
        iteration, phase, at = self.heartbeat.last
        where, collective = main_thread_position()
        return Report(iteration, phase, time.monotonic() - at, where, collective)

    def _stop_job(self, field: str, limit: float, own: bool) -> None:
        mine = self._report()
        reports, heard, claimed = {self.rank: mine}, {}, True
        if self.store is not None:
            try:
                reports, heard, claimed = self._gather(mine, own)
            except Exception:  # the store failed: report what this rank knows
                pass
        if claimed:
            message = hang_message(self.world, reports, heard, field, limit)
            for handler in logging.getLogger("bridge").handlers:  # the run's log lines before it
                handler.flush()
            print(f"error: {message}", file=sys.stderr, flush=True)  # one line, from one rank
        else:
            time.sleep(self.grace_s)  # the claiming rank's message first; the launcher may stop us before
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self._exit(HANG_EXIT_CODE)

    def _gather(self, mine: Report, own: bool) -> tuple[dict[int, Report], dict[int, tuple[int, str]], bool]:
        store = self.store
        store.set(f"report/{self.rank}", mine.to_json())
        if own:
            store.set("hang", str(self.rank))
        keys = [f"report/{r}" for r in range(self.world)]
        deadline = time.monotonic() + self.grace_s
        while not store.check(keys) and time.monotonic() < deadline:
            time.sleep(0.1)
        reports = {r: Report.from_json(store.get(k)) for r, k in enumerate(keys) if store.check([k])}
        heard = {}
        for r in range(self.world):
            if r not in reports and store.check([f"beat/{r}"]):
                it, phase = json.loads(store.get(f"beat/{r}"))
                heard[r] = (it, phase)
        return reports, heard, store.add("claimed", 1) == 1


_watches = 0  # watchdogs started in this process: every rank starts them in the same order


def job_store():
    """A connection of the watchdog's own to the process group's store, under a key prefix per torchrun
    attempt and per run of this process (a second run may reuse the process group), or None without one."""
    import torch.distributed as dist  # the module itself stays torch-free (Heartbeat, hang_message)

    global _watches
    _watches += 1
    try:
        store = dist.distributed_c10d._get_default_store().clone()
    except Exception:  # no default store (a group made without one) or a store that cannot be cloned
        return None
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"bridge_ft_{attempt}_{_watches}/", store)
