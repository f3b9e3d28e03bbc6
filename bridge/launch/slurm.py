"""SLURM: the run as an sbatch script, one torchrun agent per node started by `srun`.

The script asks for `nodes` nodes with one task each; the first node of the allocation hosts the c10d
rendezvous (`scontrol show hostnames`). Each node's agent writes its own log (`srun --output` with %n,
the node's index). SLURM's job id is the rendezvous id, so a requeued attempt (`--requeue`) meets in a
fresh rendezvous and resumes from checkpoint.save. A `--chain` of K jobs, each starting when the one
before it ended (`--dependency=afterany`), continues a run longer than the partition's time limit: the
jobs share one BRIDGE_SCHEDULER_JOB, so each takes over the checkpoint lock a killed predecessor left.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from bridge.config.scheduler_job import JOB_ENV
from bridge.errors import ConfigError
from bridge.launch.spec import LaunchSpec, quote


@dataclass(frozen=True)
class SlurmOptions:
    account: str | None = None
    partition: str | None = None
    time: str | None = None  # sbatch --time, e.g. 04:00:00
    container_image: str | None = None  # pyxis/enroot: srun --container-image
    container_mounts: str | None = None  # srun --container-mounts, e.g. /data:/data
    cpus_per_task: int | None = None
    log_dir: str = "logs"
    requeue: bool = False  # let SLURM requeue the job after a node failure (or scontrol requeue)
    chain: int = 1  # jobs submitted one after another (--dependency=afterany)
    # seconds before the time limit SLURM sends SIGTERM to the batch step and its ranks: the run saves
    # and stops (bridge.training.exit_requests) before the limit's SIGKILL
    signal_before_end_s: int = 300
    extra: tuple[str, ...] = ()  # further sbatch options, each a --flag=value


def render(spec: LaunchSpec, opts: SlurmOptions, chain_id: str | None = None) -> str:
    """The sbatch script. `chain_id`: the identity the jobs of one --chain share (None: SLURM's job id)."""
    spec.check()
    log_dir = Path(opts.log_dir)
    if not log_dir.is_absolute():
        log_dir = Path(spec.workdir) / log_dir
    header = [
        f"--job-name={spec.job_name}",
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",  # one torchrun agent per node; it starts the node's ranks
        f"--output={log_dir}/%x-%j.out",
        "--open-mode=append",  # a requeued attempt appends to the same logs
        f"--chdir={spec.workdir}",
        f"--signal=B:TERM@{opts.signal_before_end_s}",
    ]
    if spec.gpus:
        header.append(f"--gpus-per-node={spec.procs_per_node}")
    for flag, value in (("account", opts.account), ("partition", opts.partition), ("time", opts.time)):
        if value:
            header.append(f"--{flag}={value}")
    if opts.cpus_per_task:
        header.append(f"--cpus-per-task={opts.cpus_per_task}")
    header.append("--requeue" if opts.requeue else "--no-requeue")
    for flag in opts.extra:
        if not flag.startswith("--"):
            raise ConfigError(
                f"--sbatch {flag!r}: give sbatch options as --flag=value. Fix: e.g. --sbatch=--qos=high"
            )
        header.append(flag)
    srun = [
        "srun",
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f"--output={log_dir}/%x-%j-node%n.out",
    ]
    if opts.container_image:
        srun.append(f"--container-image={opts.container_image}")
        srun.append(f"--container-workdir={spec.workdir}")
        if opts.container_mounts:
            srun.append(f"--container-mounts={opts.container_mounts}")
    agent = [spec.python, "-m", "bridge.cli", "run"]
    torchrun = spec.torchrun_args('"$head_node:' + str(spec.rdzv_port) + '"', '"$SLURM_JOB_ID"')
    lines = [
        "#!/bin/bash",
        "# written by `bridge launch slurm`: one torchrun agent per node, c10d rendezvous",
    ]
    lines += [f"#SBATCH {h}" for h in header]
    lines += ["", "set -euo pipefail", f"mkdir -p {shlex.quote(str(log_dir))}"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in spec.env]
    if chain_id:
        lines.append(f"export {JOB_ENV}={shlex.quote(chain_id)}  # one identity for the jobs of the chain")
    lines += [
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'echo "job $SLURM_JOB_ID (restart count ${SLURM_RESTART_COUNT:-0}): ' + f"{spec.nodes} node(s) x "
        f'{spec.procs_per_node} rank(s), rendezvous on $head_node:{spec.rdzv_port}"',
        # srun in the background and `wait`: the batch shell then runs its TERM trap at once (--signal=B:)
        "trap 'kill -TERM $srun_pid 2>/dev/null' TERM",
        " ".join(srun)
        + " \\\n    "
        + " ".join(agent)
        + " "
        + " ".join(torchrun)
        + " \\\n    "
        + quote(spec.script_words())
        + " &",
        "srun_pid=$!",
        'wait "$srun_pid" || { status=$?; wait "$srun_pid"; exit $status; }',
    ]
    return "\n".join(lines) + "\n"


def write_script(text: str, path: Path) -> None:
    """Published atomically: a job submitted meanwhile never reads half a script."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.replace(path)


def submit(path: Path, chain: int, sbatch: str = "sbatch") -> list[str]:
    """Submit the script `chain` times, each job after the one before has ended; the job ids."""
    ids: list[str] = []
    for _ in range(chain):
        cmd = [sbatch, "--parsable"]
        if ids:
            cmd.append(f"--dependency=afterany:{ids[-1]}")
        cmd.append(str(path))
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise ConfigError(
                f"{sbatch!r} not found: bridge launch slurm submits with SLURM's sbatch. Fix: run it on a "
                "login node of the cluster, or --dry-run to print the script"
            ) from None
        if done.returncode != 0:
            raise ConfigError(
                f"sbatch refused {path} (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}. "
                "Fix: correct the option it names (--account, --partition, --time, --sbatch=...)"
            )
        ids.append(done.stdout.strip().split(";")[0])  # --parsable: "id" or "id;cluster"
    return ids


def chain_identity(chain: int) -> str | None:
    """The BRIDGE_SCHEDULER_JOB the jobs of one chain share; None for one job (SLURM's id is enough)."""
    return f"slurm-chain:{uuid.uuid4().hex}" if chain > 1 else None
