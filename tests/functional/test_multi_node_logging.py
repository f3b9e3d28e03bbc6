"""A two-node run (two torchrun agents on this host, one rank each, static rendezvous as on a cluster): the
logging rank is the last one (node 1), and node 0's log shows the same iteration lines, so that the log a
user opens first (the first node's, a scheduler's per-node file) shows the run."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.functional.launch import REPO_ROOT, free_port
from tests.functional.test_slurm_launch import TINY


def test_every_node_logs_the_iteration_lines(tmp_path):
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                f"--node_rank={node}",
                "--nproc_per_node=1",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                str(REPO_ROOT / "scripts/training/run_recipe.py"),
                *TINY,
                "train.train_iters=3",
                f"checkpoint.save={tmp_path / 'ckpt'}",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for node in (0, 1)
    ]
    logs = [agent.communicate(timeout=400)[0] for agent in agents]
    lines = []
    for node, (agent, log) in enumerate(zip(agents, logs, strict=True)):
        assert agent.returncode == 0, (node, log[-3000:])
        assert re.findall(r" iteration\s+(\d)/\s+3 \|", log) == ["1", "2", "3"], (node, log[-3000:])
        lines.append(re.findall(r" iteration\s+\d/\s+3 \|.*", log))
    # the same lines, times included: node 0 prints what the logging rank (node 1) computed
    assert lines[0] == lines[1] and "lm loss" in lines[0][0], lines
