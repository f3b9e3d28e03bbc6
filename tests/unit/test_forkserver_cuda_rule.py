"""forkserver.fork_is_safe: when ranks forked from the test launcher's fork server can use CUDA."""

from __future__ import annotations

import pytest

from tests.functional.forkserver import fork_is_safe


@pytest.mark.parametrize(
    ("devices", "initialized", "poisoned", "safe"),
    [
        (0, False, False, True),  # CPU build of torch, no GPU
        (0, False, True, True),  # CUDA build without a driver: forks are marked, but no rank uses CUDA
        (1, False, False, True),  # NVML answered the preload's checks: the forks are clean
        (8, False, True, False),  # the CUDA runtime was queried: "Cannot re-initialize CUDA" in every rank
        (1, True, True, False),  # a preloaded module initialised CUDA
    ],
)
def test_fork_is_safe(devices, initialized, poisoned, safe):
    state = {"cuda_devices": devices, "cuda_initialized": initialized, "cuda_poisoned_fork": poisoned}
    ok, reason = fork_is_safe(state)
    assert ok is safe
    assert (reason == "") is safe
