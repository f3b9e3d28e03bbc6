"""optimizer.optimizer=muon on 2 gloo ranks (DP=2): Muon's and Adam's optimizer state saved in the
torch_dist checkpoint and resumed gives the uninterrupted run's next steps exactly (workers/muon_resume.py,
in the 2-rank bundled launch; skipped where the plan refuses Muon, megatron-core 0.16.1). QK-clip trains
(with Muon where it runs, else Adam) and logs each step's max attention logit. Muon at TP=2 (muon_tp_mode
duplicated / distributed) and, on a tiny MoE, at EP=2 takes TP=1's / EP=1's steps (workers/muon_parallel.py,
the same launch)."""

from __future__ import annotations

import math

import pytest
import torch

from bridge.config.checks.muon import MEGATRON_CORE_MIN, _release, emerging_optimizers_version
from bridge.models.transformer_fields import INSTALLED_RELEASE
from tests.functional.launch import records_by_tag
from tests.tolerances import logits_tolerance

pytestmark = pytest.mark.bundled("muon_resume.py", "{workdir}", nproc=2)
MUON_RUNS = _release(INSTALLED_RELEASE) >= MEGATRON_CORE_MIN and emerging_optimizers_version() is not None


def _ints(d: dict) -> dict:
    return {int(k): v for k, v in d.items()}


@pytest.mark.skipif(not MUON_RUNS, reason=f"megatron-core {INSTALLED_RELEASE}: the plan refuses Muon")
def test_resume_with_muon_state_matches_uninterrupted_exactly(bundled):
    runs = records_by_tag(bundled.case)
    ref, got = runs["uninterrupted"], runs["resumed"]
    assert sorted(_ints(got["losses"])) == [3, 4]
    for it in (3, 4):
        assert _ints(got["losses"])[it] == _ints(ref["losses"])[it]
        assert _ints(got["grad_norms"])[it] == _ints(ref["grad_norms"])[it]
    # iteration 3's loss is computed before any resumed optimizer step; iteration 4's follows the
    # first step taken with the loaded state, and differs without it (the state is not re-zeroed)
    fresh = _ints(runs["without_optimizer_state"]["losses"])
    assert fresh[3] == _ints(ref["losses"])[3] and fresh[4] != _ints(ref["losses"])[4]


def test_qk_clip_trains_and_logs_the_max_attention_logit(bundled):
    run = records_by_tag(bundled.case)["qk_clip"]
    assert run["optimizer"] == ("muon" if MUON_RUNS else "adam")
    logits = {int(k): v["max-attention-logit"] for k, v in run["metrics"].items()}
    losses = _ints(run["losses"])
    assert sorted(logits) == sorted(losses) == [1, 2, 3]
    # the first step's logits exceed the threshold 0.05 and are clipped to it: the next batch's largest
    # logit (weights moved little: lr 1e-4) comes out well below the first's
    assert logits[1] > 2 * 0.05 and logits[2] < 0.75 * logits[1], logits
    assert all(math.isfinite(v) for v in logits.values()), logits
    assert "max-attention-logit" in bundled.case


# fp32 forward and fp32 Newton-Schulz (muon_fp32_matmul_prec=highest): TP=2 and EP=2 sum the same products in
# another order, so the loss and the gradient norm differ by at most what two correct fp32 implementations of
# the model may differ by (tests/tolerances.py: 4 layers, hidden 64, MLP / expert width <= 128), ~4e-4 at
# their magnitude. Newton-Schulz normalises each update, so a rounding-level gradient difference moves the
# next weights by lr times a rounding-level amount and the bound holds step after step (measured: <= 5e-7).
TINY = {"num_hidden_layers": 4, "hidden_size": 64, "intermediate_size": 128}


def _close(ref: dict, got: dict) -> list[tuple[int, float, float]]:
    """(step, |got - ref|, bound) of every step whose value is out of the bound."""
    ref, got = _ints(ref), _ints(got)
    assert sorted(ref) == sorted(got) == [1, 2, 3, 4]
    out = []
    for it, want in ref.items():
        bound = logits_tolerance(torch.tensor([want]), TINY)
        if abs(got[it] - want) > bound:
            out.append((it, abs(got[it] - want), bound))
    return out


@pytest.mark.bundled("muon_parallel.py", "{workdir}", nproc=2)
@pytest.mark.skipif(not MUON_RUNS, reason=f"megatron-core {INSTALLED_RELEASE}: the plan refuses Muon")
def test_muon_at_tp2_and_ep2_equals_tp1(bundled):
    runs = records_by_tag(bundled.case)
    for ref, got in (("dense_tp1", "dense_tp2_duplicated"), ("dense_tp1", "dense_tp2_distributed"),
                     ("moe_ep1", "moe_ep2")):  # fmt: skip
        for series in ("losses", "grad_norms"):
            assert not _close(runs[ref][series], runs[got][series]), (
                got,
                series,
                _close(runs[ref][series], runs[got][series]),
            )
    # the steps move the loss, so equal losses say the updates were equal
    assert abs(_ints(runs["dense_tp1"]["losses"])[4] - _ints(runs["dense_tp1"]["losses"])[2]) > 1e-2
    # blockwise orthogonalizes each TP shard alone: another update, which the comparison tells apart (its first
    # step acts on iteration 3; iterations 1 and 2 precede any update at a non-zero learning rate)
    late = [it for it, _, _ in _close(runs["dense_tp1"]["losses"], runs["dense_tp2_blockwise"]["losses"])]
    assert late == [3, 4], late
