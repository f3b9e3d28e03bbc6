"""Restart after a failed rank: under torchrun --max-restarts (what `bridge launch` renders), a rank
killed with -9 (once mid-save, once after a complete save) makes the agent restart the workers, each
attempt resumes from the last complete checkpoint by itself, and the final weights are bit-identical to an
uninterrupted run's (the same worker without kills). Real torchrun (`bridge run`): the fork server has no
restarts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.functional.launch import REPO_ROOT
from tests.functional.test_slurm_launch import TINY

WORKER = Path(__file__).parent / "workers" / "restart_kill.py"


def _run(workdir: Path, mode: str) -> str:
    workdir.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO_ROOT}:{WORKER.parent}"}
    cmd = [sys.executable, "-m", "bridge.cli", "run", "--standalone", "--nproc-per-node=2", "--max-restarts=2",
           "--monitor-interval=0.5", str(WORKER), str(workdir), mode]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return out


def _weights(ckpt: Path, out: Path) -> dict:
    dcp_to_torch_save(ckpt / "iter_0000008", out)
    state = torch.load(out, weights_only=False)
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor) and "optimizer" not in k}


def test_killed_ranks_restart_resume_and_end_bit_identical(tmp_path):
    killed = _run(tmp_path / "kill", "kill")
    assert "@@kill -9 rank 1 at manifest_written of iteration 3 (attempt 0)" in killed
    assert "@@kill -9 rank 0 at done of iteration 6 (attempt 1)" in killed
    assert (
        "@@finished attempt 2 rank 0 iteration 8" in killed
        and "@@finished attempt 2 rank 1 iteration 8" in killed
    )
    # rank 1 died after every rank had written iteration 3 (the manifest stage): 3 is complete, and
    # rank 0 published it; attempt 2 resumes from 6
    assert [int(n) for n in re.findall(r"resumed from \S+ at iteration (\d+)", killed)] == [3, 6], killed[
        -4000:
    ]
    _run(tmp_path / "plain", "plain")
    a = _weights(tmp_path / "kill" / "ck", tmp_path / "a.pt")
    b = _weights(tmp_path / "plain" / "ck", tmp_path / "b.pt")
    assert a.keys() == b.keys() and len(a) > 5
    for key in a:  # bit-identical: same data, same order of operations, same RNG state restored
        assert torch.equal(a[key], b[key]), key


def test_a_mistake_is_not_retried_by_restarts(tmp_path):
    # a mistake (here 3 key/value heads for 4 query heads; a NaN stop takes the same path) fails every attempt alike:
    # the restarted attempts stop at once, saying why, instead of repeating the run up to the mistake
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--max-restarts=2", "--monitor-interval=0.5", str(REPO_ROOT / "scripts/training/run_recipe.py"),
           *(a for a in TINY if not a.startswith("model.num_query_groups=")), "model.num_query_groups=3"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-4000:]
    first = re.findall(r"^error: (?!not retried).*num_query_groups = 3.*$", out, re.M)
    again = re.findall(
        r"^error: not retried: an earlier attempt of this launch stopped .*num_query_groups = 3.*$", out, re.M
    )
    assert len(first) == 1 and len(again) == 2, out[-4000:]  # attempt 0 ran, attempts 1 and 2 refused
