"""The process rules behind "a stop is a save" (issue 27), in one process: what the training loop's exit
requests tell the checkpoint writer's processes, and the parent-death signal of a rank under torchrun.
The runs themselves are tests/functional/test_stop_signals.py."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import time
from types import SimpleNamespace

import pytest

from bridge.checkpoint import writer_processes
from bridge.parallel import parent_death
from bridge.training.exit_requests import ExitRequests

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _parent_death_signal() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.c_int(0)
    assert libc.prctl(2, ctypes.byref(value), 0, 0, 0) == 0  # PR_GET_PDEATHSIG
    return value.value


def _sleep_then_exit(seconds: float) -> None:
    time.sleep(seconds)
    os._exit(7)


def _train_cfg(**kw):
    return SimpleNamespace(exit_duration_in_mins=None, exit_signal="SIGUSR1", **kw)


def test_exit_requests_name_the_stop_signals_while_the_loop_runs(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    exits = ExitRequests(_train_cfg())
    try:
        assert writer_processes.stop_signals() == {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}
    finally:
        exits.restore()
    assert writer_processes.stop_signals() == frozenset()


@linux_only
def test_a_forked_helper_outlives_stop_signals_and_the_loops_own_one():
    writer_processes.install_writer_reaper()
    fork = multiprocessing.get_context("fork")
    writer_processes.set_stop_signals({signal.SIGVTALRM})  # an unusual train.exit_signal, while the loop runs
    try:
        writer = fork.Process(target=_sleep_then_exit, args=(1.5,))
        writer.start()
    finally:
        writer_processes.set_stop_signals(())
    time.sleep(0.3)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGVTALRM):
        os.kill(writer.pid, signum)
    writer.join(10)
    assert writer.exitcode == 7  # it ran to its end: the save it was writing is not broken
    plain = fork.Process(target=_sleep_then_exit, args=(5,))  # forked after the loop: SIGVTALRM's default
    plain.start()
    time.sleep(0.3)
    os.kill(plain.pid, signal.SIGVTALRM)
    plain.join(10)
    assert plain.exitcode == -signal.SIGVTALRM


class _SlowItems:
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(0.01)
        return i


@linux_only
def test_a_data_loader_worker_survives_sigterm_from_the_launcher():
    """torchrun's killpg reaches the DataLoader's workers too; a worker killed by it makes torch's SIGCHLD
    check raise in the rank ("DataLoader worker (pid N) is killed by signal: Terminated")."""
    import subprocess

    import torch

    writer_processes.install_writer_reaper()
    loader = torch.utils.data.DataLoader(_SlowItems(), num_workers=2, persistent_workers=True)
    batches = iter(loader)  # forks the workers
    pids = [w.pid for w in batches._workers]
    # sent by another process, as torchrun's, right after the fork: a worker that has not run yet is
    # covered too (the mask is set in the forking thread, not by the child)
    subprocess.run(["kill", "-TERM", *map(str, pids)], check=True)
    time.sleep(0.5)
    assert [int(next(batches)) for _ in range(21)] == list(range(21))
    batches._shutdown_workers()


@linux_only
def test_a_rank_under_torchrun_asks_for_sigterm_when_torchrun_dies(monkeypatch):
    before = _parent_death_signal()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    exits = ExitRequests(_train_cfg())
    try:
        assert _parent_death_signal() == signal.SIGTERM
        assert exits.received is None  # the launcher is alive
    finally:
        exits.restore()
        parent_death.signal_on_parent_death(before)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    exits = ExitRequests(_train_cfg())  # a plain process (python run_recipe.py): its parent is the shell
    exits.restore()
    assert _parent_death_signal() == before
