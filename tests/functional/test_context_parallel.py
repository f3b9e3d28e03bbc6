"""Context parallelism on CPU: CP=2 (bridge's sdpa attention, K/V all-gathered over the CP group)
trains exactly like CP=1, alone (2 ranks), with TP=2 + SP and with PP=2 (4 ranks).

One worker (workers/cp_equivalence.py) in three launches: 1 rank (CP=1, the reference, which also
writes the data and the initial weights), 2 ranks (CP=2), 4 ranks (CP=2 x TP=2, then CP=2 x PP=2). Same
weights, data and global batch; per iteration the lm loss and grad norm, and at iterations 1 and 3
every parameter's gradient norm, must equal the reference's to 1e-5 relative.
"""

from __future__ import annotations

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, payloads, torchrun

pytest.importorskip("megatron.core")

WORKER = REPO_ROOT / "tests/functional/workers/cp_equivalence.py"
REL = 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("context_parallel"))
    out = ""
    for nproc, mode in ((1, "ref"), (2, "cp2"), (4, "cp2_tp2_pp2")):
        out += assert_ok(torchrun(WORKER, nproc, mode, workdir, timeout=420))
    results = {r["run"]: r for r in payloads(out, "run")}
    for r in payloads(out, "grads"):
        results[r["run"]].setdefault("param_grad_norms", {})[r["iteration"]] = r["norms"]
    return results


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


@pytest.mark.parametrize("run", ["cp2", "cp2_tp2", "cp2_pp2"])
def test_cp2_losses_and_grad_norms_equal_cp1(runs, run):
    ref, got = runs["cp1"], runs[run]
    assert sorted(got["losses"]) == sorted(ref["losses"]) == ["1", "2", "3"]
    for it in ref["losses"]:
        assert _rel(got["losses"][it], ref["losses"][it]) < REL, (
            run,
            it,
            got["losses"][it],
            ref["losses"][it],
        )
        assert _rel(got["grad_norms"][it], ref["grad_norms"][it]) < REL, (run, it)


@pytest.mark.parametrize("run", ["cp2", "cp2_tp2", "cp2_pp2"])
def test_cp2_parameter_gradients_equal_cp1(runs, run):
    ref, got = runs["cp1"]["param_grad_norms"], runs[run]["param_grad_norms"]
    assert sorted(got) == sorted(ref) == [1, 3]
    for it in (1, 3):
        assert set(ref[it]) <= set(got[it]), (run, sorted(set(ref[it]) - set(got[it])))
        assert len(ref[it]) == 4 * 6 + 2  # 4 layers x (2 norms, qkv, proj, fc1, fc2), embedding, final norm
        for name, norm in ref[it].items():
            assert norm > 0, (name, it)
            assert _rel(got[it][name], norm) < REL, (run, it, name, got[it][name], norm)


def test_reference_learns(runs):
    losses = runs["cp1"]["losses"]
    assert losses["3"] < losses["1"]
