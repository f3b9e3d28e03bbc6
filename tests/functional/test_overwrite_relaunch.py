"""checkpoint.overwrite=true left in a requeued command applies once (issue 42): the first launch moves
the older run's checkpoints aside and says so in its log, the relaunches resume the new run, and the
three launches' losses are those of an uninterrupted run (workers/overwrite_relaunch.py, 2 ranks)."""

from __future__ import annotations

from tests.functional.launch import REPO_ROOT, assert_ok, records_by_tag, torchrun

WORKER = REPO_ROOT / "tests/functional/workers/overwrite_relaunch.py"


def _ints(d: dict) -> dict:
    return {int(k): v for k, v in d.items()}


def test_overwrite_applies_once_across_relaunches(tmp_path):
    out = assert_ok(torchrun(WORKER, 2, str(tmp_path), timeout=600))
    got = records_by_tag(out)["overwrite"]
    first, second, third = (_ints(d) for d in got["launches"])
    assert sorted(first) == [1, 2] and sorted(second) == [3, 4] and sorted(third) == [5, 6], got["launches"]
    # bit-identical: the same data order, weights, optimizer and RNG state as the uninterrupted run
    assert {**first, **second, **third} == _ints(got["uninterrupted"])
    assert got["iters"] == ["iter_0000002", "iter_0000004", "iter_0000006"]
    # the older run's complete checkpoints were moved aside whole, once
    assert len(got["retired"]) == 1 and {"iter_0000002", "iter_0000004"} <= set(got["retired"][0])
    applied = [line for line in out.splitlines() if "checkpoint.overwrite=true applied" in line]
    assert len(applied) == 1 and "moved the previous run's checkpoints (iterations 2, 4)" in applied[0], (
        applied
    )
    assert out.count("this re-run resumed its own checkpoint.save") == 2
