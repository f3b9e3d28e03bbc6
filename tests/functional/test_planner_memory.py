"""The planner's parameter memory per rank equals what a tiny Megatron model allocates (TP=2 x PP=2, gloo)."""

import json

import pytest


@pytest.mark.bundled("planner_memory.py", nproc=4)  # workers/planner_memory.py, in the 4-rank bundled launch
def test_param_and_grad_memory_per_rank_match_megatron(bundled):
    out = bundled.case
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines() if "RESULT " in line]
    assert len(results) == 8, out[-3000:]  # 4 ranks x 2 models
    for r in results:
        assert (r["real_dense"], r["real_expert"]) == (r["est_dense"], r["est_expert"]), r
        assert r["real_param_bytes"] == r["est_param_bytes"], r
        assert r["est_grad_bytes"] <= r["real_grad_bytes"] <= 1.01 * r["est_grad_bytes"], r
    # every (stage, tp rank) of both models is covered, and the MoE model really has expert parameters
    assert {(r["model"], r["stage"], r["tp_rank"]) for r in results} == {
        (m, s, t) for m in ("llama_tied", "qwen3_moe_like") for s in (0, 1) for t in (0, 1)
    }
    assert all(r["real_expert"] > 0 for r in results if r["model"] == "qwen3_moe_like")
