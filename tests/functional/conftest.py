"""The functional tests' two tiers, and the launches several modules share.

The fast tier (`pytest -m "not slow" tests`, the README's test command) keeps the smoke set of
tests/functional/tiers.py. Every other functional test is marked `slow` here and runs in the full suite
(`pytest tests`, CI's second phase). A test already marked slow in its module stays slow."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.functional.fsdp2_checks import run_suites
from tests.functional.tiers import in_smoke_set

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers
def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        try:
            relative = item.path.relative_to(HERE)
        except ValueError:
            continue  # not a functional test
        nodeid = relative.as_posix() + item.nodeid[item.nodeid.index("::") :]
        if not in_smoke_set(nodeid):
            item.add_marker(slow)


@pytest.fixture(scope="session")
def fsdp2_runs(request, tmp_path_factory) -> dict[str, dict]:
    """Every fsdp2 equivalence run the session needs, from one 4-rank launch: the suites (the SUITE of
    each test_fsdp2*.py module) of the collected tests that use this fixture."""
    suites = sorted(
        {
            item.module.SUITE
            for item in request.session.items
            if "fsdp2_runs" in getattr(item, "fixturenames", ())
        }
    )
    return run_suites(tmp_path_factory, suites)
