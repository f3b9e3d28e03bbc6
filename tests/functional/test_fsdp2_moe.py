"""strategy fsdp2 with a 4-expert MoE on 4 gloo ranks: experts sharded with their layer (EP=1) or over
the MoE mesh's ep_shard axis (EP=2, also with HSDP 2x2 and TP=2+SP) reproduce strategy megatron's
losses and grad norms over 3 steps (1e-5 relative) (tests/functional/workers/fsdp2_equivalence.py)."""

from __future__ import annotations

import pytest

from tests.functional.fsdp2_checks import check_matches

SUITE = "moe"
PAIRS = {  # fsdp2 run -> the megatron run it must reproduce
    "fsdp2_moe_dp4": "megatron_moe_dp4",
    "fsdp2_moe_ep2": "megatron_moe_ep2",
    "fsdp2_moe_hsdp2x2_ep2_reshard": "megatron_moe_ep2",  # HSDP x EP, moe_reshard_after_forward=True
    "fsdp2_moe_tp2ep2": "megatron_moe_tp2ep2",
    "fsdp2_moe_pp2ep2": "megatron_moe_pp2ep2",  # PP x EP (ep_shard = 1)
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


def test_moe_reshard_after_forward_reaches_fully_shard(runs):
    assert runs["fsdp2_moe_ep2"]["layers_reshard_after_forward"] == [False]  # AutoModel's MoE default
    assert runs["fsdp2_moe_hsdp2x2_ep2_reshard"]["layers_reshard_after_forward"] == [True]
    assert runs["fsdp2_moe_dp4"]["layers_reshard_after_forward"] == [True]  # ep = 1: FSDP2's default
