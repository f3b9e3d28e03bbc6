"""One run per checkpoint directory: `<save>/.bridge.lock` names the run that writes there.

The lock file is created with O_EXCL and holds {"pid", "host", "started", "proc_start"}. A second
run finds it and stops with an error naming the owner and the file. A lock is stale (taken over with a
warning) when its owner ran on this host and that process no longer exists (or the pid now belongs to
a process started later), or when it was left by this very process (an earlier pretrain() call).
A lock from another host cannot be checked: the error says to delete the file if that run is gone, unless
both runs are attempts of one scheduler job (the lock's "job": a SLURM job id, a Kubernetes job uid;
bridge.config.scheduler_job): a requeued attempt of the job takes over the lock its killed attempt left on
another node (the scheduler runs one attempt at a time). A different job is refused as before.
Pure Python.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from bridge.errors import ConfigError

LOCK_FILENAME = ".bridge.lock"


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (field 22 of /proc/<pid>/stat), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DirLock:
    def __init__(self, root: str | os.PathLike, job: str | None = None):
        self.root = Path(root)
        self.job = job  # the scheduler job this run is an attempt of (None: not under a scheduler)
        self.path = self.root / LOCK_FILENAME
        self.held = False

    def _mine(self) -> dict:
        pid = os.getpid()
        return {
            "pid": pid,
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "proc_start": _proc_start(pid),
            "job": self.job,
        }

    def _owner(self) -> dict | None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # half-written by a process killed while creating it: stale
        return data if isinstance(data, dict) else {}

    def _stale(self, owner: dict) -> str | None:
        """Why the lock may be taken over, or None when its owner may still be running."""
        pid, host = owner.get("pid"), owner.get("host")
        if not isinstance(pid, int) or not host:
            return "the lock file is unreadable"
        if host != socket.gethostname():
            if self.job and owner.get("job") == self.job:
                return f"it was left on host {host} by an earlier attempt of this scheduler job ({self.job})"
            return None
        if pid == os.getpid():
            return "it was left by this process"
        if not _alive(pid):
            return f"process {pid} no longer exists"
        if owner.get("proc_start") and _proc_start(pid) not in (None, owner["proc_start"]):
            return f"pid {pid} now belongs to another process"
        return None

    def acquire(self) -> str | None:
        """Take the lock (ConfigError if another run holds it). Returns a note when a stale lock was
        taken over."""
        self.root.mkdir(parents=True, exist_ok=True)
        note = None
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is None:
                    continue  # released meanwhile
                why = self._stale(owner)
                if why is None:
                    job = owner.get("job")
                    whose = f", scheduler job {job}" if job else ""
                    mine = f" (this run is scheduler job {self.job})" if self.job else ""
                    raise ConfigError(
                        f"checkpoint.save={str(self.root)!r} is in use by another run (pid {owner.get('pid')} on "
                        f"host {owner.get('host')}{whose}, since {owner.get('started')}; lock file {self.path}){mine}: two runs "
                        "must not write one checkpoint directory. Fix: give this run its own checkpoint.save, or "
                        "wait for that run; if it is gone, delete the lock file"
                    ) from None
                note = f"took over the stale lock {self.path} ({why})"
                try:
                    self.path.unlink()
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self._mine()) + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.held = True
            return note
        raise ConfigError(f"could not take the lock {self.path}: it keeps changing; is another run starting?")

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        owner = self._owner()
        if owner and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
            self.path.unlink(missing_ok=True)
