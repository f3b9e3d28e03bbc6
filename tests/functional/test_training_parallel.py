"""Training on 4 gloo ranks: loss falls on learnable data, and TP2+SP / PP2+recompute / TP2xPP2xVPP2 / ddp
/ fsdp2 reproduce the TP1/PP1 losses from the same weights (loaded by resharding one TP1/PP1 checkpoint;
fsdp2 loads it before fully_shard)."""

from __future__ import annotations

import pytest

from tests.functional.launch import payloads

# workers/train_equivalence.py, in the 4-rank bundled launch (tests/functional/conftest.py)
pytestmark = pytest.mark.bundled("train_equivalence.py", "{workdir}", nproc=4)


@pytest.fixture(scope="module")
def run(bundles):
    out = bundles.run("train_equivalence.py", "{workdir}", nproc=4).case
    losses = {r["run"]: {int(k): v for k, v in r["losses"].items()} for r in payloads(out, "losses")}
    return out, losses


def test_loss_goes_down_on_learnable_data(run):
    _, losses = run
    ref = losses["tp1pp1"]
    assert sorted(ref) == list(range(1, 31))
    first, last = sum(ref[i] for i in range(1, 6)) / 5, sum(ref[i] for i in range(26, 31)) / 5
    assert last < first - 0.5, (first, last)


@pytest.mark.parametrize("layout", ["tp2_sp", "pp2_recompute", "tp2pp2vpp2", "ddp", "fsdp2"])
def test_layouts_and_ddp_reproduce_tp1_pp1(run, layout):
    _, losses = run
    ref, got = losses["tp1pp1"], losses[layout]
    assert sorted(got) == [1, 2, 3]
    for it in got:
        assert got[it] == pytest.approx(ref[it], rel=1e-4), (layout, it, got[it], ref[it])


def test_log_lines_use_megatron_format(run):
    out, _ = run
    lines = [line for line in out.splitlines() if line.startswith(" iteration ")]
    assert any("iteration       30/      30 | consumed samples: 240 |" in line for line in lines)
    assert all(
        "| lm loss: " in line and "| learning rate: " in line and "tokens per second:" in line
        for line in lines
    )
