"""The CPU backend's pipeline p2p on gloo: batch_p2p_comm=True is as correct as False at PP=2 + VPP."""

from __future__ import annotations

import pytest

from tests.functional.launch import payloads

# workers/cpu_p2p.py, in the 2-rank bundled launch (tests/functional/conftest.py)
pytestmark = pytest.mark.bundled("cpu_p2p.py", nproc=2)


@pytest.fixture
def out(bundled) -> str:
    return bundled.case


def test_batched_p2p_gives_the_unbatched_losses_and_grads(out):
    records = payloads(out, "losses")
    assert sorted(r["rank"] for r in records) == [0, 1], out[-3000:]
    last = next(r for r in records if r["rank"] == 1)  # the last pipeline stage holds the losses
    assert len(last["unbatched"]) == 8 and len(set(last["unbatched"])) == 8, last
    assert last["batched"] == pytest.approx(last["unbatched"], rel=1e-6, abs=0), last
    for r in records:
        assert r["max_grad_diff"] <= 1e-6, r


def test_variable_seq_length_shapes_reach_the_right_buffer(out):
    for rank in (0, 1):
        assert f"@@shapes rank {rank} OK" in out, out[-3000:]
