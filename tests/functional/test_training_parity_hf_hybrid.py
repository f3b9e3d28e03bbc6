"""A hybrid trains equal to transformers + AdamW (issue 45): the worker of test_training_parity_hf.py (same
loop, data, schedule and per-iteration tolerances) on a tiny random NemotronHForCausalLM (Mamba-2 with 2
groups of 4 heads and an SSD chunk of 8 over the 32-token windows, attention without RoPE, a squared-ReLU
MLP), trained 12 AdamW steps by bridge's pretrain() from its HF folder at TP=2 (Mamba heads and groups split)
and at TP=1 (DP=2), against transformers' class + torch.optim.AdamW over the windows bridge trained on.
One 2-rank launch (23 s on 2 cores), slow tier.

Tolerances: test_training_parity_hf.py's (loss 1e-5 relative; grad norm before clipping 2e-6, the 7
significant digits the log prints), over 12 steps instead of 5. AdamW normalises each update, so a relative
gradient difference d moves a weight by about d * lr per step: after 12 steps at lr <= 3e-3 the weights of
the two runs differ by ~1e-7 of their size for d ~ 1e-6, which keeps the losses and norms at the size of one
step's rounding. Measured (0.16.1 and 0.19.2): at most 1.8e-7 (loss) and 2.1e-7 (grad norm) over the 12
steps at both layouts, not growing with the step; a Mamba mapping or TP split mistake moves the first loss
by 1e-2 or more.
"""

from __future__ import annotations

import pytest

from tests.functional.launch import assert_ok, payloads, torchrun

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

from tests.functional.test_training_parity_hf import WORKER, assert_run_equals_reference  # noqa: E402

ITERS = [str(i) for i in range(1, 13)]  # the worker's HYBRID_ITERS
RUNS = ["nemotronh_tp2", "nemotronh_dp2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("training_parity_hf_hybrid"))
    out = assert_ok(torchrun(WORKER, 2, "hybrid", workdir, timeout=420))
    return {r["run"]: r for r in payloads(out, "run")}


@pytest.mark.slow
def test_the_reference_trains(runs):
    ref = runs["transformers_nemotronh"]
    assert sorted(ref["losses"]) == sorted(ITERS)
    assert ref["losses"]["12"] < ref["losses"]["2"] - 0.3
    assert all(ref["grad_norms"][it] > 1.0 for it in ITERS)  # clipping (1.0) active in every step


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS)
def test_losses_grad_norms_and_learning_rates_equal_transformers(runs, run):
    ref, got = runs["transformers_nemotronh"], runs[run]
    worst = {
        k: max(abs(got[k][i] - ref[k][i]) / abs(ref[k][i]) for i in ITERS) for k in ("losses", "grad_norms")
    }
    print(f"\n{run}: max relative difference over {len(ITERS)} steps {worst}, grad norms {ref['grad_norms']}")
    assert_run_equals_reference(run, runs[run], runs["transformers_nemotronh"], ITERS)
