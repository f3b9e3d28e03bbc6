"""Fixtures of the single-process tests over every family's tiny Hugging Face model
(tests/functional/workers/convert_models.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def single_process_groups():
    """The module's tests share one single-process group, torn down after the module
    (use with `pytestmark = pytest.mark.usefixtures("single_process_groups")`)."""
    yield
    from bridge.parallel import runtime

    runtime.destroy_distributed()


@pytest.fixture(scope="session")
def family_sources(tiny_hf):
    """family -> (folder, HF model) saved with save_pretrained in fp32 (tests/conftest.py: once per
    session, shared with the functional tests; the tests that change a folder copy it first)."""
    from tests.functional.workers.convert_models import FAMILIES

    return {f: tiny_hf.get(f) for f in FAMILIES}
