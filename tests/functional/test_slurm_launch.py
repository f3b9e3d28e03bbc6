"""`bridge launch slurm` against a real SLURM (Debian's slurm-wlm: munged, slurmctld, slurmd started by this
session on ports of its own, tests/functional/slurm_cluster.py): a 2-rank CPU job submitted through the
command runs to completion (exit 0:0, per-node log with the layout line and the last iteration), and a job
cancelled with `scancel` (SIGTERM: the run saves and stops) resumes from its checkpoint when the same
command submits it again. Where the daemons cannot start, the test skips with the reason (CI shows it).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.functional import slurm_cluster
from tests.functional.launch import REPO_ROOT

TINY = [
    "--recipe", "llama32_1b_pretrain_config",
    "model.num_layers=2", "model.hidden_size=64", "model.ffn_hidden_size=128", "model.num_attention_heads=4",
    "model.num_query_groups=2", "model.seq_length=64", "model.vocab_size=1024",
    "train.global_batch_size=4", "train.micro_batch_size=1",
    "scheduler.lr_warmup_iters=0", "validation.eval_iters=0", "validation.eval_interval=0",
    "logger.log_interval=1",
]  # fmt: skip


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    cluster, why = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    if cluster is None:
        pytest.skip(f"no test SLURM: {why}")
    yield cluster
    cluster.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(slurm, tmp_path: Path, name: str, *run_args: str) -> str:
    cmd = [
        sys.executable,
        "-m",
        "bridge.cli",
        "launch",
        "slurm",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--cpu",
        "--job-name",
        name,
        "--log-dir",
        str(tmp_path / "logs"),
        "--workdir",
        str(REPO_ROOT),
        "--env",
        "OMP_NUM_THREADS=1",
        "--env",
        f"PYTHONPATH={REPO_ROOT}",
        "--rdzv-port",
        str(_free_port()),
        "--",
        *TINY,
        *run_args,
    ]  # fmt: skip  (a free rendezvous port: CI's other leg may run its own job, or a launch, at the same time)
    env = {**slurm.env, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = re.search(r"as job (\d+);", done.stdout)
    assert found, done.stdout
    return found.group(1)


def _node_log(tmp_path: Path, name: str, job: str) -> str:
    return (tmp_path / "logs" / f"{name}-{job}-node0.out").read_text()


def test_two_rank_job_runs_and_a_cancelled_job_resumes(slurm, tmp_path):
    ckpt = tmp_path / "ckpt"
    # 1. a job to completion: its exit status, its per-node log
    job = _launch(slurm, tmp_path, "bridge-ok", "train.train_iters=3", f"checkpoint.save={ckpt}/ok")
    state = slurm.wait(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, timeout=420)
    log = _node_log(tmp_path, "bridge-ok", job)
    assert state == "COMPLETED" and slurm.job_state(job)[1] == "0:0", log[-3000:]
    assert re.search(r"\bDP=2\b.*\bworld=2\b", log) and re.search(r" iteration\s+3/\s+3 \|", log), log[-3000:]
    assert (ckpt / "ok" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert (
        f"job {job} (restart count 0): 1 node(s) x 2 rank(s)"
        in (tmp_path / "logs" / f"bridge-ok-{job}.out").read_text()
    )

    # 2. scancel while training: SIGTERM, the step in progress ends, the run saves and stops
    run = ("train.train_iters=400", f"checkpoint.save={ckpt}/long", "checkpoint.save_interval=1000")
    job = _launch(slurm, tmp_path, "bridge-long", *run)
    end = time.monotonic() + 300
    while not re.search(r" iteration\s+3/\s+400 \|", _read(tmp_path, "bridge-long", job)):
        assert time.monotonic() < end, _read(tmp_path, "bridge-long", job)[-3000:]
        assert slurm.job_state(job)[0] in ("PENDING", "RUNNING"), _read(tmp_path, "bridge-long", job)[-3000:]
        time.sleep(1)
    slurm.run("scancel", job)
    assert slurm.wait(job, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=120) == "CANCELLED"
    time.sleep(2)  # the ranks' last lines
    saved = int((ckpt / "long" / "latest_checkpointed_iteration.txt").read_text())
    assert 3 <= saved < 400, _read(tmp_path, "bridge-long", job)[-3000:]

    # 3. the same command again: the new job resumes from that checkpoint (and is cancelled in turn)
    again = _launch(slurm, tmp_path, "bridge-long", *run)
    end = time.monotonic() + 300
    pattern = rf"resumed from .*iter_{saved:07d} at iteration {saved}"
    while not re.search(pattern, _read(tmp_path, "bridge-long", again)):
        assert time.monotonic() < end, _read(tmp_path, "bridge-long", again)[-3000:]
        assert slurm.job_state(again)[0] in ("PENDING", "RUNNING"), _read(tmp_path, "bridge-long", again)[
            -3000:
        ]
        time.sleep(1)
    slurm.run("scancel", again)
    slurm.wait(again, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=120)


def _read(tmp_path: Path, name: str, job: str) -> str:
    path = tmp_path / "logs" / f"{name}-{job}-node0.out"
    return path.read_text() if path.exists() else ""
