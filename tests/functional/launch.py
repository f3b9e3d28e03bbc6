"""Run a worker script on N gloo ranks (forked from the session's fork server, or under torchrun) and
return what it printed."""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
    launcher: str  # "torchrun" or "forkserver"


# Every multi-rank launch of the session, in order (tests/conftest.py prints them per launcher at the end).
LAUNCHES: list[Launch] = []


def count_launch(script: str | Path, nproc: int, started: float, launcher: str = "torchrun") -> None:
    """Record a launch that began at time.monotonic() `started` and has just ended."""
    LAUNCHES.append(Launch(Path(script).name, nproc, time.monotonic() - started, launcher))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(env: dict | None) -> dict[str, str]:
    # Not PYTHONUNBUFFERED: unbuffered, print() writes the text and its newline separately, so lines of
    # different ranks can interleave; workers write their records with train_common.write_line instead.
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    full_env.pop("PYTHONUNBUFFERED", None)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    return full_env


def torchrun(
    script: str | Path,
    nproc: int,
    *args: str,
    timeout: float = 600,
    env: dict | None = None,
    real: bool = False,
) -> subprocess.CompletedProcess:
    """Launch `script` on `nproc` local ranks; returns the CompletedProcess (stdout and stderr merged).

    The ranks are forked from the session's fork server (tests/functional/forkserver.py: torchrun's
    environment and exit status, without each rank importing torch and Megatron-Core again); `real=True`,
    or BRIDGE_TEST_LAUNCHER=torchrun for every launch, runs torchrun itself: for a test of what only
    torchrun shows (its output when the libraries are imported, its own summary). Where forked ranks
    could not use CUDA (the server says so in its first reply), every launch runs torchrun itself."""
    started = time.monotonic()
    launcher = "torchrun" if real or os.environ.get("BRIDGE_TEST_LAUNCHER") == "torchrun" else "forkserver"
    if launcher == "forkserver" and not forkserver_client().fork_safe:
        launcher = "torchrun"  # ranks forked from the server could not use CUDA (forkserver.fork_is_safe)
    try:
        if launcher == "torchrun":
            return _real_torchrun(script, nproc, args, timeout, _environment(env))
        return forkserver_client().launch(str(script), nproc, args, timeout, _environment(env))
    finally:
        count_launch(script, nproc, started, launcher)


def _real_torchrun(script, nproc: int, args, timeout: float, env: dict) -> subprocess.CompletedProcess:
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
    # A process group of its own, so a timeout can kill torchrun *and* its worker processes.
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        process_group=0,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(
            f"torchrun {script} timed out after {timeout} s\n{(out or '')[-6000:]}"
        ) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


class ForkServerClient:
    """This pytest session's fork server (started on first use, ended with the session)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="bridge-forkserver-"))
        self.log = open(self.folder / "forkserver.log", "w")  # noqa: SIM115 (kept for the session)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.functional.forkserver"], cwd=REPO_ROOT, env=_environment(None),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
        )  # fmt: skip
        self.count = 0
        atexit.register(self.close)
        from tests.functional.forkserver import fork_is_safe

        self.cuda_state: dict = self._read()["cuda"]  # once the server has imported the libraries
        self.fork_safe, self.unsafe_reason = fork_is_safe(self.cuda_state)

    def _read(self, timeout: float | None = None) -> dict | None:
        """The next reply, or None when `timeout` seconds pass first."""
        if timeout is not None and not select.select([self.proc.stdout], [], [], max(timeout, 0))[0]:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(
                f"the fork server died\n{(self.folder / 'forkserver.log').read_text()[-6000:]}"
            )
        return json.loads(line)

    def launch(self, script: str, nproc: int, args, timeout: float, env: dict) -> subprocess.CompletedProcess:
        self.count += 1
        output = self.folder / f"launch{self.count}.out"
        request = {
            "script": script, "args": list(args), "nproc": nproc, "env": env, "cwd": str(REPO_ROOT),
            "output": str(output), "master_port": free_port(),
        }  # fmt: skip
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        first = self._read()
        if "refused" in first:
            raise AssertionError(first["refused"])
        leader = first["pid"]
        reply = self._read(timeout)
        if reply is None:  # the leader's process group: the leader and its ranks
            os.killpg(leader, signal.SIGKILL)
            self._read()
        out = output.read_text(errors="replace") if output.exists() else ""
        output.unlink(missing_ok=True)
        cmd = ["forkserver", f"--nproc_per_node={nproc}", script, *args]
        if reply is None:
            raise AssertionError(f"launch of {script} timed out after {timeout} s\n{out[-6000:]}")
        return subprocess.CompletedProcess(cmd, reply["returncode"], out, None)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@functools.cache
def forkserver_client() -> ForkServerClient:
    return ForkServerClient()


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
