"""Run a worker script under torchrun with N gloo ranks and return what it printed."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Launch:
    """One multi-rank launch of this pytest session: what ran, on how many ranks, for how long."""

    script: str
    nproc: int
    seconds: float


# Every torchrun launch of the session, in order: tests/conftest.py prints their count at the end, since
# the per-launch cost (each rank imports torch and Megatron-Core) is where the functional tier's time goes.
LAUNCHES: list[Launch] = []


def count_launch(script: str | Path, nproc: int, started: float) -> None:
    """Record a launch that began at time.monotonic() `started` and has just ended."""
    LAUNCHES.append(Launch(Path(script).name, nproc, time.monotonic() - started))


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
    # different ranks can interleave; workers write their records with train_common.write_line instead.
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    full_env.pop("PYTHONUNBUFFERED", None)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    # A session of its own, so a timeout can kill torchrun *and* its worker processes.
    started = time.monotonic()
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
    finally:
        count_launch(script, nproc, started)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def assert_ok(proc) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-6000:]}"
    return proc.stdout


_MARKER = re.compile(r"@@(\w+) ")


def records(out: str, tag: str | None = None) -> list[tuple[str, object]]:
    """The workers' `@@<tag> <payload>` records in output order, as (tag, payload); only `tag`'s if given.

    A payload starting with { or [ is decoded JSON, any other the rest of its line. Workers write each
    record with one os.write (train_common.write_line), so a record is whole, but another rank's unfinished
    line can come before it: the marker is searched anywhere in a line and the JSON decoded up to its end."""
    decode = json.JSONDecoder().raw_decode
    found = []
    for line in out.splitlines():
        m = _MARKER.search(line)
        if not m or (tag is not None and m.group(1) != tag):
            continue
        payload = line[m.end() :]
        found.append((m.group(1), decode(payload)[0] if payload.startswith(("{", "[")) else payload))
    return found


def payloads(out: str, tag: str) -> list:
    """The payloads of `tag`'s records, in output order."""
    return [payload for _, payload in records(out, tag)]


def records_by_tag(out: str) -> dict[str, object]:
    """Each tag's last payload."""
    return dict(records(out))
