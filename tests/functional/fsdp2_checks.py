"""Shared by the test_fsdp2*.py modules: launch their suites of tests/functional/workers/fsdp2_equivalence.py
together on 4 gloo ranks (one launch: tests/functional/conftest.py's fsdp2_runs) and compare each fsdp2 run
with the strategy-megatron run it must reproduce."""

from __future__ import annotations

from tests.functional.launch import REPO_ROOT, assert_ok, payloads, torchrun

WORKER = REPO_ROOT / "tests/functional/workers/fsdp2_equivalence.py"


def run_suites(tmp_path_factory, suites: list[str], timeout: float) -> dict[str, dict]:
    """Every run of `suites` (run names are unique across suites), by name (losses, grad_norms, mesh_ok)."""
    work = str(tmp_path_factory.mktemp("fsdp2"))
    out = assert_ok(torchrun(WORKER, 4, work, ",".join(suites), timeout=timeout))
    return {r["run"]: r for r in payloads(out, "run")}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def check_matches(runs: dict[str, dict], fsdp2_run: str, reference: str) -> None:
    """Losses and grad norms over the 3 steps within 1e-5 relative; clipping was active."""
    got, ref = runs[fsdp2_run], runs[reference]
    assert sorted(got["losses"], key=int) == ["1", "2", "3"]
    for key in ("losses", "grad_norms"):
        worst = max(_rel(got[key][it], ref[key][it]) for it in ref[key])
        assert worst <= 1e-5, (fsdp2_run, key, worst, got[key], ref[key])
    assert max(ref["grad_norms"].values()) > 0.5  # optimizer.clip_grad=0.5 clipped those steps
