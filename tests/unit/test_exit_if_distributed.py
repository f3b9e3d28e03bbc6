"""bridge.process_exit.exit_if_distributed: a rank that raised leaves at once (traceback, exit 1); a
process without a process group is left to raise as usual."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bridge.process_exit import exit_if_distributed
from tests.functional.launch import REPO_ROOT

IN_A_GROUP = textwrap.dedent(
    """
    import atexit, threading, time
    import torch.distributed as dist
    from bridge.process_exit import exit_if_distributed

    dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1)
    # what kept a failed rank from exiting: a non-daemon thread the interpreter's exit would join
    threading.Thread(target=time.sleep, args=(600,)).start()
    atexit.register(lambda: print("atexit ran"))
    try:
        raise RuntimeError("the step failed")
    except Exception as error:
        exit_if_distributed(error)
    print("not reached")
    """
)


def test_outside_a_process_group_it_returns():
    assert exit_if_distributed(RuntimeError("x")) is None


def test_a_rank_that_raised_exits_at_once_with_its_traceback():
    proc = subprocess.run(
        [sys.executable, "-c", IN_A_GROUP],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip  (the 600 s thread would outlast the timeout if the exit waited for it)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "RuntimeError: the step failed" in proc.stderr
    assert "not reached" not in proc.stdout and "atexit ran" not in proc.stdout
