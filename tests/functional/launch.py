"""Run a worker script under torchrun with N gloo ranks and return what it printed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: str | Path, nproc: int, *args: str, timeout: float = 600, env: dict | None = None):
    """Launch `script` on `nproc` local ranks; returns the CompletedProcess (stdout and stderr merged)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(script),
        *args,
    ]
    # Not PYTHONUNBUFFERED: unbuffered, print() writes the text and its newline separately, so lines of
    # different ranks can interleave; workers print with flush=True (one write per line) instead.
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    full_env.pop("PYTHONUNBUFFERED", None)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    # A session of its own, so a timeout can kill torchrun *and* its worker processes.
    proc = subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(
            f"torchrun {script} timed out after {timeout} s\n{(out or '')[-6000:]}"
        ) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def assert_ok(proc) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-6000:]}"
    return proc.stdout
