"""Multi-latent attention at TP=2 + sequence parallelism trains as TP=1 (workers/mla_tp.py, in the 2-rank
bundled launch): losses, grad norms and every parameter's gradient norm over 3 Adam steps from one saved
start. Without bridge's RoPE-key hook (bridge/models/mla_rope_grad.py) Megatron-Core's all-gather keeps one
TP rank's share of the shared RoPE key's gradient, which the same comparison catches."""

from __future__ import annotations

import pytest

from tests.functional.launch import records, records_by_tag

pytestmark = pytest.mark.bundled("mla_tp.py", "{workdir}", nproc=2)
REL = 1e-5  # fp32, 4 layers: the relative bound of the context-parallel comparison (test_context_parallel.py)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _param_norms(out: str) -> dict[tuple[str, int], dict[str, float]]:
    return {(p["run"], p["iteration"]): p["norms"] for _, p in records(out, "grads")}


def test_mla_tp2_sp_equals_tp1_and_the_rope_key_hook_is_what_makes_it(bundled):
    runs, norms = records_by_tag(bundled.case), _param_norms(bundled.case)
    ref, got = runs["tp1"], runs["tp2_sp"]
    for series in ("losses", "grad_norms"):
        for it in ("1", "2", "3"):
            assert _rel(got[series][it], ref[series][it]) < REL, (
                series,
                it,
                got[series][it],
                ref[series][it],
            )
    for it in (1, 3):
        want, have = norms[("tp1", it)], norms[("tp2_sp", it)]
        assert (
            want.keys() == have.keys() and len(want) == 4 * 11 + 2
        )  # 4 layers x 11 weights, embedding, final norm
        bad = {k: (have[k], want[k]) for k in want if _rel(have[k], want[k]) >= REL}
        assert not bad, (it, bad)
    # Megatron-Core's gradient as it is: linear_kv_down_proj's already at iteration 1 (one start)
    unfixed = norms[("tp2_sp_unfixed", 1)]
    wrong = sorted(k for k in unfixed if _rel(unfixed[k], norms[("tp1", 1)][k]) >= REL)
    assert "decoder.layers.3.self_attention.linear_kv_down_proj.weight" in wrong, wrong
