"""The dry run and the run cannot drift: for a recipe of every model and setting (shrunk to a tiny shape) and a table of
override sets, "the dry run accepts it" implies "one real training step on CPU runs", and "the dry run
refuses it" implies the run refuses it with the same message (tests/functional/workers/plan_drift.py)."""

from __future__ import annotations

import json

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, torchrun
from tests.functional.workers.plan_drift import (
    ACCEPTED_CASES_ON,
    CASES,
    ON_EVERY_RECIPE,
    PRETRAIN_RECIPES,
    REFUSED_CASES,
)

REFUSED = set(REFUSED_CASES)


@pytest.fixture(scope="module")
def results():
    out = assert_ok(torchrun(REPO_ROOT / "tests/functional/workers/plan_drift.py", 1, timeout=1200))
    rows = [
        json.loads(line.removeprefix("RESULT ")) for line in out.splitlines() if line.startswith("RESULT ")
    ]
    assert rows, out[-3000:]
    return rows


@pytest.mark.slow
def test_dry_run_verdict_is_the_run_verdict(results):
    pretrain = set(PRETRAIN_RECIPES)  # one per model and setting (the worker says which)
    assert {r[0] for r in results} == pretrain
    assert set(ACCEPTED_CASES_ON) <= pretrain
    expected = {(recipe, case) for recipe in pretrain for case in CASES}
    expected = {(r, c) for r, c in expected if c in ON_EVERY_RECIPE or r in ACCEPTED_CASES_ON}
    assert {(r[0], r[1]) for r in results} == expected
    for recipe, case, dry_code, dry_error, run_code, run_error in results:
        where = f"{recipe} / {case}"
        if case in REFUSED:
            assert dry_code == 2 and dry_error.startswith("error: "), where
            assert (run_code, run_error) == (dry_code, dry_error), where
        else:
            assert (dry_code, dry_error) == (0, ""), f"{where}: {dry_error}"
            assert (run_code, run_error) == (0, ""), (
                f"{where}: the dry run accepted it, the run said {run_error}"
            )
