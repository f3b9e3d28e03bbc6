"""The functional tests' two tiers, and the launches several modules share.

The fast tier (`pytest -m "not slow" tests`, the README's test command) keeps the smoke set of
tests/functional/tiers.py. Every other functional test is marked `slow` here and runs in the full suite
(`pytest tests`, CI's second phase). A test already marked slow in its module stays slow."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.functional.fsdp2_checks import run_suites
from tests.functional.launch import assert_ok, torchrun
from tests.functional.tiers import in_smoke_set, leg_of

HERE = Path(__file__).parent
BUNDLE = HERE / "workers" / "bundle.py"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "bundled(script, *args, nproc): worker SCRIPT (tests/functional/workers/) with ARGS ('{workdir}': a "
        "folder of its own) runs on NPROC ranks in one launch with the session's other cases of that world "
        "size (workers/bundle.py); the test reads it with the `bundled` fixture or `bundles.run`",
    )


# A shared launch runs several workers' work, all of it in the setup of the first test that uses it: that
# test gets pytest's limit (pyproject's 600 s per test) once per share, and so does the launch itself.
SHARED_LAUNCH_TIMEOUT = 1800


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers
def pytest_collection_modifyitems(config, items):
    slow, ci_leg = pytest.mark.slow, os.environ.get("BRIDGE_CI_LEG")
    other_leg = []
    for item in items:
        try:
            relative = item.path.relative_to(HERE)
        except ValueError:
            continue  # not a functional test
        nodeid = relative.as_posix() + item.nodeid[item.nodeid.index("::") :]
        if not in_smoke_set(nodeid):
            item.add_marker(slow)
        if ci_leg and leg_of(nodeid) not in (None, ci_leg):
            other_leg.append(item)
        if {"fsdp2_runs", "bundles"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.timeout(SHARED_LAUNCH_TIMEOUT))
    if other_leg:  # tiers.ONE_LEG: the other CI leg runs these
        config.hook.pytest_deselected(items=other_leg)
        items[:] = [item for item in items if item not in other_leg]


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
    return run_suites(tmp_path_factory, suites, timeout=SHARED_LAUNCH_TIMEOUT)


@dataclass(frozen=True)
class BundledRun:
    """One case of a bundled launch: its output (every rank's, in rank order), the whole launch's
    (torchrun's own and every case's: for what a process does once, whichever case comes first), and
    the folder given to the case for its `{workdir}` argument."""

    case: str
    launch: str
    workdir: Path


def case_id(script: str, args: tuple[str, ...]) -> str:
    return ".".join([Path(script).stem, *(a for a in args if a != "{workdir}")])


class Bundles:
    """One launch per world size for the bundled cases of the collected tests (their `bundled` markers,
    in collection order), made on first use."""

    def __init__(self, session: pytest.Session, tmp_path_factory: pytest.TempPathFactory):
        self.session, self.tmp_path_factory = session, tmp_path_factory
        self.launched: dict[int, tuple[Path, str, list[str]]] = {}  # nproc -> (workdir, output, case ids)

    def cases(self, nproc: int) -> dict[str, tuple[str, ...]]:
        """case id -> (script, args...) of this world size."""
        found: dict[str, tuple[str, ...]] = {}
        for item in self.session.items:
            for marker in item.iter_markers("bundled"):
                if marker.kwargs["nproc"] == nproc:
                    found.setdefault(case_id(marker.args[0], marker.args[1:]), marker.args)
        return found

    def run(self, script: str, *args: str, nproc: int) -> BundledRun:
        if nproc not in self.launched:
            work, cases = self.tmp_path_factory.mktemp(f"bundle{nproc}"), self.cases(nproc)
            specs = []
            for name, (case_script, *case_args) in cases.items():
                (work / name).mkdir()
                argv = [case_script, *(str(work / name) if a == "{workdir}" else a for a in case_args)]
                specs.append({"id": name, "argv": argv})
            out = assert_ok(
                torchrun(BUNDLE, nproc, str(work), json.dumps(specs), timeout=SHARED_LAUNCH_TIMEOUT)
            )
            self.launched[nproc] = (work, out, list(cases))
        work, out, names = self.launched[nproc]
        name = case_id(script, args)
        assert name in names, (name, names)

        def text(case: str) -> str:
            return "".join((work / f"{case}.rank{rank}.log").read_text() for rank in range(nproc))

        return BundledRun(text(name), out + "".join(text(case) for case in names), work / name)


@pytest.fixture(scope="session")
def bundles(request, tmp_path_factory) -> Bundles:
    return Bundles(request.session, tmp_path_factory)


@pytest.fixture
def bundled(request, bundles) -> BundledRun:
    """The output of the test's `bundled(script, args..., nproc=N)` case."""
    marker = request.node.get_closest_marker("bundled")
    return bundles.run(*marker.args, nproc=marker.kwargs["nproc"])
