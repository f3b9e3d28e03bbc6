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
def test_a_process_forked_during_the_loop_ignores_the_stop_signals_and_dies_by_sigkill():
    writer_processes.install_writer_reaper()
    fork = multiprocessing.get_context("fork")
    writer_processes.set_stop_signals({signal.SIGTERM, signal.SIGINT})
    try:
        writer = fork.Process(target=_sleep_then_exit, args=(1.5,))
        writer.start()
    finally:
        writer_processes.set_stop_signals(())
    time.sleep(0.3)
    os.kill(writer.pid, signal.SIGTERM)
    os.kill(writer.pid, signal.SIGINT)
    writer.join(10)
    assert writer.exitcode == 7  # it ran to its end: the save it was writing is not broken

    plain = fork.Process(target=_sleep_then_exit, args=(5,))  # outside the loop: the default actions
    plain.start()
    time.sleep(0.3)
    os.kill(plain.pid, signal.SIGTERM)
    plain.join(10)
    assert plain.exitcode == -signal.SIGTERM


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
