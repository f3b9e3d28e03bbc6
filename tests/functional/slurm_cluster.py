"""A real one-host SLURM for the tests: munged, slurmctld and slurmd (Debian's slurm-wlm) started with a
generated configuration in a temporary directory, on ports and a munge socket of their own, so two test
sessions (the CI legs) never share daemons. Stopped (by the pids they wrote) when the session ends.

`start()` returns None and a reason when the packages are missing or the daemons cannot start (no root,
a container without the needed privileges): the test then skips with that reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin")


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (f"{d}/{name}" for d in SBIN if os.access(f"{d}/{name}", os.X_OK)), None
    )


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    env: dict[str, str] = field(repr=False)  # SLURM_CONF for sbatch, squeue, scancel, scontrol
    pid_files: tuple[Path, ...]

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def job_state(self, job: str) -> tuple[str, str]:
        """(state, exit code "rc:signal") from scontrol (the controller keeps finished jobs MinJobAge s)."""
        out = self.run("scontrol", "show", "job", job, check=False).stdout
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        return fields.get("JobState", "UNKNOWN"), fields.get("ExitCode", "")

    def wait(self, job: str, states: set[str], timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            state, _ = self.job_state(job)
            if state in states:
                return state
            time.sleep(1)
        raise TimeoutError(f"job {job} not in {states} after {timeout} s (last {self.job_state(job)})")

    def stop(self) -> None:
        for pid_file in reversed(self.pid_files):
            try:
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, 15)
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(1)


def start(root: Path) -> tuple[SlurmCluster | None, str]:
    missing = [d for d in DAEMONS if _which(d) is None] + [c for c in ("sbatch", "scontrol") if not _which(c)]
    if missing:
        return (
            None,
            f"SLURM is not installed here ({', '.join(missing)} missing: apt-get install slurm-wlm munge)",
        )
    if os.geteuid() != 0:
        return None, "the test SLURM's slurmd must run as root (it starts jobs as their user)"
    host = socket.gethostname()
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(exist_ok=True)
    os.chmod(root / "munge", 0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = root / "munge" / "munge.socket"
    ctld_port, d_port = _free_ports(2)
    cpus = os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join([
            "ClusterName=bridgetest",
            f"SlurmctldHost={host}",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={d_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/slurmctld.log",
            f"SlurmdLogFile={root}/slurmd.log",
            "AuthType=auth/munge",
            f"AuthInfo=socket={sock}",
            "CredType=cred/munge",
            "ProctrackType=proctrack/linuxproc",  # no cgroups: works in an unprivileged container
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=600",  # finished jobs stay visible to scontrol for the test's checks
            "KillWait=30",  # scancel: SIGTERM, then SIGKILL 30 s later (the run saves in between)
            f"NodeName={host} CPUs={cpus} State=UNKNOWN",
            "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
            "",
        ])
    )  # fmt: skip
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pid_files = (root / "munge" / "munged.pid", root / "slurmctld.pid", root / "slurmd.pid")
    cluster = SlurmCluster(root=root, conf=conf, env=env, pid_files=pid_files)
    steps = [
        [_which("munged"), f"--socket={sock}", f"--key-file={key}", f"--pid-file={pid_files[0]}",
         f"--log-file={root}/munge/munged.log", f"--seed-file={root}/munge/munged.seed", "--force"],
        [_which("slurmctld"), "-f", str(conf), "-i"],
        [_which("slurmd"), "-f", str(conf)],
    ]  # fmt: skip
    for cmd in steps:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            cluster.stop()
            return None, f"{Path(cmd[0]).name} did not start: {(done.stderr or done.stdout).strip()[-400:]}"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        out = cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip()
        if out in ("idle", "mixed", "allocated"):
            return cluster, ""
        time.sleep(1)
    logs = "; ".join(
        f"{p.name}: {p.read_text()[-300:]}"
        for p in (root / "slurmctld.log", root / "slurmd.log")
        if p.exists()
    )
    cluster.stop()
    return None, f"the test SLURM's node did not come up in 60 s (sinfo: {out!r}; {logs})"
