"""optimizer.optimizer=muon on 2 gloo ranks (DP=2): Muon's and Adam's optimizer state saved in the
torch_dist checkpoint and resumed gives the uninterrupted run's next steps exactly (workers/muon_resume.py,
in the 2-rank bundled launch; skipped where the plan refuses Muon, megatron-core 0.16.1). QK-clip trains
(with Muon where it runs, else Adam) and logs each step's max attention logit."""

from __future__ import annotations

import math

import pytest

from bridge.config.checks.muon import MEGATRON_CORE_MIN, _release, emerging_optimizers_version
from bridge.models.transformer_fields import INSTALLED_RELEASE
from tests.functional.launch import records_by_tag

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
