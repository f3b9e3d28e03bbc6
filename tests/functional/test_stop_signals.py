"""A stop is a save (issue 27): signals sent to torchrun as a scheduler or a user sends them, after periodic
saves, on 2 gloo ranks. Each case is one torchrun (they end by the signal); the five run side by side.

For every case: the step in flight finishes, its checkpoint is complete (manifest verified) and tracked,
no staged `.iter_*.saving` folder is left, both ranks return from pretrain(), and no process of the
launch (ranks, checkpoint writers, the writer's results-queue server) outlives it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.functional.launch import REPO_ROOT, free_port

pytestmark = pytest.mark.slow

WORKER = REPO_ROOT / "tests/functional/workers/stop_signals.py"
CASES = ["sigterm_in_save", "sigint_group", "double_sigterm", "usr1_forwarded", "usr1_kills_torchrun"]
STOP_LINE = re.compile(r"received (SIG\w+) at iteration (\d+): saved checkpoint (\S+); exiting")
# torchrun's own lines: its logging (I/W/E + date) and the SignalException traceback it re-raises
TORCHRUN_LOG = re.compile(r"^[IWE]\d{4} .*torch/distributed/elastic/")
TORCHRUN_END = re.compile(r"SignalException: Process \d+ got signal: \d+$")


def _processes_of(token: str) -> list[str]:
    """Live processes (not zombies) whose environment carries `token`: every descendant of a launch,
    forked or spawned."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if token.encode() not in Path(f"/proc/{pid}/environ").read_bytes():
                continue
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if state != "Z":
            found.append(f"{pid}: {cmd[:200]}")
    return found


class _Launch:
    def __init__(self, case: str, root: Path):
        self.case, self.work = case, root / case
        self.work.mkdir()
        self.token = f"BRIDGE_STOP_TEST={os.getpid()}-{case}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
        env.pop("PYTHONUNBUFFERED", None)
        env["BRIDGE_STOP_TEST"] = self.token.split("=", 1)[1]
        if case == "usr1_forwarded":  # torchrun --signals-to-handle (its default: the first 4); older
            # releases read TORCHELASTIC_SIGNALS_TO_HANDLE directly
            forwarded = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
            env["PET_SIGNALS_TO_HANDLE"] = env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = forwarded
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={free_port()}", str(WORKER), str(self.work), case]  # fmt: skip
        self.log = open(self.work / "out.txt", "w")  # a file: ranks may outlive torchrun (the orphan cases)
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip

    def finish(self, deadline: float) -> dict:
        try:
            rc = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = None
        while (left := _processes_of(self.token)) and time.monotonic() < deadline:
            time.sleep(0.5)
        if rc is None or left:
            for line in left:
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
            if rc is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()
        out = (self.work / "out.txt").read_text()
        return {"rc": rc, "left": left, "out": out, "root": self.work / "ck"}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    root = tmp_path_factory.mktemp("stop")
    launches = [_Launch(case, root) for case in CASES]
    deadline = time.monotonic() + 600
    return {launch.case: launch.finish(deadline) for launch in launches}


def _tail(got: dict) -> str:
    return f"rc {got['rc']}, left {got['left']}\n" + "\n".join(got["out"].splitlines()[-60:])


def _check_saved_at_the_stop(got: dict, signal_name: str, iteration: int, earlier: list[int]) -> list[str]:
    """The stop line, the checkpoint it names, the folder; returns the output lines after the stop line."""
    from bridge.checkpoint import manifest, paths

    lines = got["out"].splitlines()
    said = [i for i, line in enumerate(lines) if STOP_LINE.search(line)]
    assert len(said) == 1, _tail(got)
    name, it, folder = STOP_LINE.search(lines[said[0]]).groups()
    root = got["root"]
    assert (name, int(it), folder) == (signal_name, iteration, str(paths.checkpoint_dir(root, iteration))), (
        _tail(got)
    )
    assert paths.latest_iteration(root) == iteration, _tail(got)
    assert paths.complete_iterations(root) == [*earlier, iteration]
    for done in paths.complete_iterations(root):
        assert manifest.verify(paths.checkpoint_dir(root, done)) == [], done
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".iter_")) == []  # no staged save
    done = sorted(re.findall(r"@@done (\d) (\d+) (.*)", got["out"]))
    assert done == [
        ("0", str(iteration), f"received {signal_name}"),
        ("1", str(iteration), f"received {signal_name}"),
    ]
    assert got["left"] == [], _tail(got)
    assert "Traceback" not in "\n".join(lines[: said[0]]), _tail(got)
    return lines[said[0] + 1 :]


def _only_torchrun_after(rest: list[str], got: dict) -> None:
    """After the stop line: the ranks' records, and what torchrun prints when it re-raises the signal (its
    log lines and one SignalException traceback, exit 1), nothing of the ranks' (no `[rank0]:` lines)."""
    others = [ln for ln in rest if not ln.startswith("@@") and not TORCHRUN_LOG.search(ln)]
    assert got["rc"] in (0, 1), _tail(got)
    assert not any("[rank" in ln for ln in others), _tail(got)
    if others:
        assert others[0] == "Traceback (most recent call last):" and TORCHRUN_END.search(others[-1]), _tail(
            got
        )
        assert sum("Traceback" in ln for ln in others) == 1, _tail(got)


def test_sigterm_to_torchrun_during_a_periodic_save_finishes_that_save_and_stops(stopped):
    got = stopped["sigterm_in_save"]
    rest = _check_saved_at_the_stop(got, "SIGTERM", 4, earlier=[2])
    _only_torchrun_after(rest, got)


def test_ctrl_c_to_the_process_group_saves_the_step_in_flight(stopped):
    got = stopped["sigint_group"]
    rest = _check_saved_at_the_stop(got, "SIGINT", 5, earlier=[2, 4])
    _only_torchrun_after(rest, got)


def test_a_double_sigterm_saves_and_leaves_no_process_behind(stopped):
    got = stopped["double_sigterm"]
    _check_saved_at_the_stop(got, "SIGTERM", 5, earlier=[2, 4])


def test_exit_signal_forwarded_by_torchrun_saves_the_step_in_flight(stopped):
    got = stopped["usr1_forwarded"]
    rest = _check_saved_at_the_stop(got, "SIGUSR1", 5, earlier=[2, 4])
    _only_torchrun_after(rest, got)


def test_exit_signal_that_kills_torchrun_stops_the_ranks_with_a_save(stopped):
    got = stopped["usr1_kills_torchrun"]
    assert got["rc"] == -signal.SIGUSR1, _tail(got)  # torchrun does not handle it: it dies at once
    _check_saved_at_the_stop(got, "SIGTERM", 5, earlier=[2, 4])  # the ranks get SIGTERM when it dies
