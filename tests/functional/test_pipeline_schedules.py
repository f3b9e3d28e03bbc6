"""torch.distributed.pipelining schedules over Megatron-Core chunks (gpipe, looped_bfs, dfs, zero_bubble) on 2
and 4 gloo ranks reproduce a PP=1 run of the same batches from the same weights: the losses and grad norms
of 2 steps (on 2 ranks also the validation losses, forward only, after each step) and every parameter's
finalised gradient (tp = 1: elementwise; TP=2 + SP: per-parameter norms), within 1e-5 relative; with DP > 1
(Megatron-Core DDP all-reduce, distributed optimizer), tied embeddings across the first and last stage,
micro batches of 2, scale_grads_in_schedule both ways, and strategy fsdp2 under dfs. The refused schedules
are refused by the launched run with the dry run's message (tests/functional/workers/pipeline_schedules.py).
Uneven stages (a 5-layer model on 2 and 4 stages: first/last stage counts, layout strings, virtual stages)
under Megatron-Core's 1F1B / interleaved schedules and torch's gpipe / dfs / zero_bubble reproduce its PP=1
run the same way, in the same launches."""

from __future__ import annotations

import pytest

from tests.functional.launch import payloads

# workers/pipeline_schedules.py per suite, in the bundled launches of 2 and 4 ranks (tests/functional/conftest.py)
pytestmark = [
    pytest.mark.bundled("pipeline_schedules.py", "{workdir}", "world2", nproc=2),
    pytest.mark.bundled("pipeline_schedules.py", "{workdir}", "world4", nproc=4),
]
RUNS = {
    "world2": ["gpipe_pp2", "looped_bfs_pp2_vpp2_scaled", "dfs_pp2_vpp2", "zero_bubble_pp2_vpp2"],
    "world4": [
        "gpipe_pp4",
        "looped_bfs_pp2_vpp2_mbs2_distopt",
        "zero_bubble_pp4_vpp2",
        "zero_bubble_tp2_pp2_vpp2",
        "seeded_dfs_pp2_vpp2",  # built from the seed: the same weights as the checkpoint
        "seeded_fsdp2_dfs_pp2_vpp2",
    ],
}
TOL = 1e-5
# uneven runs (workers/pipeline_schedules.uneven_runs) -> the dry run's layers per pipeline rank
UNEVEN = {
    "world2": {
        "uneven_1f1b_first3": "3+2",
        "uneven_interleaved_layout": "1/2+1/1",
        "uneven_gpipe_last1": "4+1",
        "uneven_dfs_layout": "1/1+2/1",
    },
    "world4": {
        "uneven_1f1b_pp4_layout": "1+1+1+2",
        "uneven_gpipe_pp4_first2": "2+1+1+1",
        "uneven_zero_bubble_pp2_vpp2": "2/1+1/1",
    },
}


def _suite(bundles, suite: str) -> dict[str, dict]:
    out = bundles.run(
        "pipeline_schedules.py", "{workdir}", suite, nproc=int(suite.removeprefix("world"))
    ).case
    runs = {record["run"]: record for record in payloads(out, "run")}
    return runs | {f"refused:{record['case']}": record for record in payloads(out, "refused")}


@pytest.fixture(scope="module")
def world2(bundles):
    return _suite(bundles, "world2")


@pytest.fixture(scope="module")
def world4(bundles):
    return _suite(bundles, "world4")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _check_same_training(got: dict, ref: dict) -> None:
    keys = ["losses", "grad_norms"] + (["validation_losses"] if ref["validation_losses"] else [])
    for key in keys:
        assert sorted(got[key]) == ["1", "2"], (got["run"], key, got[key])
        worst = max(_rel(got[key][it], ref[key][it]) for it in ref[key])
        assert worst <= TOL, (got["run"], key, worst, got[key], ref[key])


def _check(runs: dict, name: str) -> None:
    got, ref = runs[name], runs["pp1"]
    assert got["engine"] == "torch" and "torch.distributed.pipelining" in got["pipeline"], got
    assert got["names_match"] is True, name
    _check_same_training(got, ref)
    assert got["max_norm_diff"] is not None or "distopt" in name, name
    for key in ("max_grad_diff", "max_norm_diff"):
        if got[key] is not None:
            assert got[key] <= TOL, (name, key, got[key])
    if "tp2" not in name and "distopt" not in name:
        assert got["max_grad_diff"] is not None, name  # every gradient compared elementwise


@pytest.mark.parametrize("name", RUNS["world2"])
def test_two_ranks_match_pp1_losses_and_gradients(world2, name):
    assert sorted(world2["pp1"]["validation_losses"]) == ["1", "2"]  # the forward-only path ran too
    _check(world2, name)


@pytest.mark.parametrize(
    "case, rule",
    [
        ("v_schedule", "ScheduleZBVZeroBubble needs the V stage layout"),
        ("zero_bubble_recompute", "Checkpointing is not compatible with .grad()"),
        ("gpipe_with_vpp", "ScheduleGPipe runs one stage per pipeline rank"),
        ("dfs_5_microbatches", "needs m = 5 to be a multiple of that"),
    ],
)
def test_refusals_are_the_dry_runs_refusals(world2, case, rule):
    record = world2[f"refused:{case}"]
    code, error = record["dry"]
    assert code == 2 and error.startswith("error: ") and rule in error, record
    assert record["launched"] == record["dry"], record  # the launched run refuses before any model is built


@pytest.mark.parametrize("name", RUNS["world4"])
def test_four_ranks_match_pp1_losses_and_gradients(world4, name):
    _check(world4, name)


@pytest.mark.parametrize("suite,name", [(suite, name) for suite, runs in UNEVEN.items() for name in runs])
def test_uneven_stages_match_pp1_losses_and_gradients(request, suite, name):
    runs = request.getfixturevalue(suite)
    got, ref = runs[name], runs["uneven_pp1"]
    assert got["pipeline"].endswith(f"layers per rank {UNEVEN[suite][name]}"), got["pipeline"]
    assert got["names_match"] is True, name
    _check_same_training(got, ref)
    for key in ("max_grad_diff", "max_norm_diff"):
        assert got[key] is not None and got[key] <= TOL, (name, key, got[key])
