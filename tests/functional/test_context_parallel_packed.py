"""Context parallelism with packed finetuning rows on CPU: a tiny Hugging Face Llama finetuned (SFT,
rows of 64 tokens, every sample padded to a multiple of 2*cp = 4) under CP=2 trains exactly like CP=1
(tests/functional/workers/cp_packed_equivalence.py, whose cp2_tp2 / tp2 modes, measured once, agree to
1.5e-7 as well; CP x TP is in CI unpacked, tests/functional/test_context_parallel.py: each rank takes
chunks r and 2*cp-1-r of every segment; sdpa attends to the gathered K/V within each segment)."""

from __future__ import annotations

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, payloads, torchrun

pytest.importorskip("megatron.core")

WORKER = REPO_ROOT / "tests/functional/workers/cp_packed_equivalence.py"
REL = 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("cp_packed"))
    out = ""
    for nproc, modes in ((1, "ref"), (2, "cp2")):
        out += assert_ok(torchrun(WORKER, nproc, modes, workdir, timeout=420))
    return {r["run"]: r for r in payloads(out, "run")}


@pytest.mark.parametrize("run, reference", [("cp2", "ref")])
def test_packed_cp2_losses_and_grad_norms_equal_cp1(runs, run, reference):
    got, ref = runs[run], runs[reference]
    assert sorted(got["losses"]) == sorted(ref["losses"]) == ["1", "2", "3", "4"]
    for key in ("losses", "grad_norms"):
        for it, want in ref[key].items():
            assert abs(got[key][it] - want) <= REL * abs(want), (run, key, it, got[key][it], want)
    assert ref["losses"]["4"] < ref["losses"]["1"]  # the reference learns
