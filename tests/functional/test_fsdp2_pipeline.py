"""strategy fsdp2 composed with Megatron-Core's pipeline schedules on 4 gloo ranks (PP=2 1f1b; TP=2 x
PP=2 x VPP=2 interleaved; PP=2 with full activation recompute; tied embeddings across the first and
last stage) reproduces strategy megatron:
the same losses and grad norms over 3 steps (1e-5 relative) (tests/functional/workers/fsdp2_equivalence.py)."""

from __future__ import annotations

import pytest

from tests.functional.fsdp2_checks import check_matches

SUITE = "pipeline"
PAIRS = {  # fsdp2 run -> the megatron run it must reproduce
    "fsdp2_pp2": "megatron_pp2",
    "fsdp2_tp2pp2vpp2": "megatron_tp2pp2vpp2",
    "fsdp2_pp2_recompute": "megatron_pp2",  # distributed.activation_checkpointing (full recompute)
}


@pytest.fixture(scope="module")
def runs(fsdp2_runs):  # tests/functional/conftest.py: one launch for the collected fsdp2 suites
    return fsdp2_runs


@pytest.mark.parametrize("fsdp2_run", sorted(PAIRS))
def test_fsdp2_matches_megatron_losses_and_grad_norms(runs, fsdp2_run):
    check_matches(runs, fsdp2_run, PAIRS[fsdp2_run])


@pytest.mark.parametrize("fsdp2_run", sorted(PAIRS))
def test_fsdp2_mesh_groups_are_megatron_core_groups(runs, fsdp2_run):
    assert runs[fsdp2_run]["mesh_ok"] is True
