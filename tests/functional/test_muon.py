"""optimizer.optimizer=muon on 2 gloo ranks (DP=2): Muon's and Adam's optimizer state saved in the
torch_dist checkpoint and resumed gives the uninterrupted run's next steps exactly (workers/muon_resume.py,
in the 2-rank bundled launch). Skipped where the plan refuses Muon (megatron-core 0.16.1)."""

from __future__ import annotations

import pytest

from bridge.config.checks.muon import MEGATRON_CORE_MIN, _release, emerging_optimizers_version
from bridge.models.transformer_fields import INSTALLED_RELEASE
from tests.functional.launch import records_by_tag

pytestmark = [
    pytest.mark.skipif(
        _release(INSTALLED_RELEASE) < MEGATRON_CORE_MIN or emerging_optimizers_version() is None,
        reason=f"megatron-core {INSTALLED_RELEASE}: the plan refuses Muon (tests/unit/test_muon.py)",
    ),
    pytest.mark.bundled("muon_resume.py", "{workdir}", nproc=2),
]


def _ints(d: dict) -> dict:
    return {int(k): v for k, v in d.items()}


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
