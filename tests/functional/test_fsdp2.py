"""strategy fsdp2 (PyTorch fully_shard on bridge.parallel.mesh's DeviceMesh) on 4 gloo ranks reproduces
strategy megatron: the same losses and grad norms over 5 steps (1e-5 relative), from the same seed, with
tied embeddings and gradient clipping active (tests/functional/workers/fsdp2_equivalence.py)."""

from __future__ import annotations

import pytest

from tests.functional.fsdp2_checks import check_matches, run_suite

SUITE = "dp_tp"
PAIRS = {  # fsdp2 run -> the megatron run it must reproduce
    "fsdp2_dp4": "megatron_dp4",
    "fsdp2_hsdp2x2": "megatron_dp4",
    "fsdp2_tp2": "megatron_tp2",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_suite(tmp_path_factory, SUITE)


@pytest.mark.parametrize("fsdp2_run", sorted(PAIRS))
def test_fsdp2_matches_megatron_losses_and_grad_norms(runs, fsdp2_run):
    check_matches(runs, fsdp2_run, PAIRS[fsdp2_run])


@pytest.mark.parametrize("fsdp2_run", sorted(PAIRS))
def test_fsdp2_mesh_groups_are_megatron_core_groups(runs, fsdp2_run):
    assert runs[fsdp2_run]["mesh_ok"] is True
