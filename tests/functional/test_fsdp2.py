"""strategy fsdp2 (PyTorch fully_shard on bridge.parallel.mesh's DeviceMesh) on 4 gloo ranks reproduces
strategy megatron: the same losses and grad norms over 3 steps (1e-5 relative), from the same seed, with
tied embeddings and gradient clipping active (tests/functional/workers/fsdp2_equivalence.py); with
gradients reduced once per step (defer_fsdp_grad_sync, the default) or after every micro batch, and with
CP=2."""

from __future__ import annotations

import pytest

from tests.functional.fsdp2_checks import check_matches

SUITE = "dp_tp"
PAIRS = {  # fsdp2 run -> the megatron run it must reproduce
    "fsdp2_dp4": "megatron_dp4",
    "fsdp2_tp2": "megatron_tp2",
    "fsdp2_dp4_sync_each_microbatch": "megatron_dp4",  # distributed.defer_fsdp_grad_sync=False
    "fsdp2_cp2": "megatron_dp4",  # CP=2 x dp_shard=2: the same global batch, so DP=4's numbers
    "fsdp2_automodel_yaml_hsdp": "megatron_dp4",  # HSDP 2 x 2 from the seeds' AutoModel `distributed:` YAML
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


def test_defer_fsdp_grad_sync_reduces_once_per_step(runs):
    # 8 samples / (micro batch 1 x dp 4) = 2 micro batches: deferring halves the reduce-scatters
    deferred, each = (
        runs["fsdp2_dp4"]["reduce_scatters"],
        runs["fsdp2_dp4_sync_each_microbatch"]["reduce_scatters"],
    )
    assert deferred > 0 and each == 2 * deferred, (deferred, each)
