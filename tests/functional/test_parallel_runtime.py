"""initialize_distributed + the CPU backend under real process groups (gloo), on tiny Megatron-Core GPTs.

Three cases: 4 ranks (TP=2 x PP=2 with sequence parallelism vs PP=1), 2 ranks (TP=2 vs TP=1 logits,
MoE EP=2 training step), each in its world size's bundled launch (tests/functional/conftest.py), and one
plain process without torchrun.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.errors import ConfigError
from bridge.parallel import ranks
from tests.functional.launch import REPO_ROOT, assert_ok

WORKERS = Path(__file__).parent / "workers"


@pytest.mark.bundled("runtime_pipeline.py", nproc=4)
def test_tp2_pp2_sequence_parallel_matches_pp1(bundled):
    out = bundled.case
    # The success signal: the layout line, once per initialization (rank 0 only; the second,
    # idempotent call with the same layout logs nothing).
    assert out.count("parallel layout: TP=2 PP=1 CP=1 EP=1 ETP=1 DP=2 EDP=4 world=4") == 1, out[-3000:]
    assert out.count("parallel layout: TP=2 PP=2 CP=1 EP=1 ETP=1 DP=1 EDP=2 world=4") == 1, out[-3000:]
    # library use (no logging configured, no set_verbosity(True)): the CPU backend's detail line stays off
    assert "CPU backend for Megatron-Core installed" not in bundled.launch, bundled.launch[-3000:]
    for rank, stage in [(0, 0), (1, 0), (2, 1), (3, 1)]:
        assert f"rank {rank} stage {stage}: OK" in out, out[-3000:]


@pytest.mark.bundled("runtime_tp_moe.py", nproc=2)
def test_tp2_logits_match_tp1_and_moe_ep2_trains_a_step(bundled):
    out = bundled.case
    assert out.count("parallel layout: TP=2 PP=1 CP=1 EP=1 ETP=1 DP=1 EDP=2 world=2") == 1, out[-3000:]
    assert out.count("parallel layout: TP=1 PP=1 CP=1 EP=2 ETP=1 DP=2 EDP=1 world=2") == 1, out[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: TP=2 logits == TP=1 logits" in out, out[-3000:]
        assert f"rank {rank} ep_rank {rank}: MoE EP=2 step OK" in out, out[-3000:]


def test_single_process_without_torchrun():
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, str(WORKERS / "runtime_single.py")],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
    )
    out = assert_ok(proc)
    assert "single process OK" in out
    # Three initializations (the idempotent calls in between log nothing).
    assert out.count("parallel layout: TP=1 PP=1 CP=1 EP=1 ETP=1 DP=1 EDP=1 world=1") == 3, out[-3000:]
    assert out.count("parallel layout: demo warning from the layout") == 1, out[-3000:]
    assert "CPU backend for Megatron-Core installed" not in out, out[-3000:]  # detail: -v only


def test_env_world_size(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert ranks.env_world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert ranks.env_world_size() == 4
    for bad in ("0", "-2", "four"):
        monkeypatch.setenv("WORLD_SIZE", bad)
        with pytest.raises(ConfigError, match=f"WORLD_SIZE='{bad}'.*torchrun"):
            ranks.env_world_size()
