"""The fork server (tests/functional/forkserver.py) and CUDA: its probe of the forks' CUDA state is what a
forked rank really sees, the server never initialises CUDA itself, and a rank it forks can use CUDA
wherever the client keeps launching through it (with a GPU: `pytest -m gpu` under the default launcher).
On a machine without a driver the probe still runs for real: a CUDA build of torch marks forks as bad
there too (seen with torch 2.13+cu130), a CPU build does not."""

from __future__ import annotations

from tests.functional.forkserver import fork_is_safe
from tests.functional.launch import REPO_ROOT, assert_ok, forkserver_client, payloads, torchrun

PROBE = REPO_ROOT / "tests/functional/workers/cuda_fork_probe.py"


def test_forked_ranks_see_the_cuda_state_the_server_reports(tmp_path):
    client = forkserver_client()
    state = client.cuda_state
    assert state["cuda_initialized"] is False, state  # no preloaded module may initialise CUDA
    assert (client.fork_safe, client.unsafe_reason) == fork_is_safe(state)
    if client.fork_safe:  # forked straight from the server, whatever BRIDGE_TEST_LAUNCHER says
        env = {"PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
        proc = client.launch(str(PROBE), 1, [], 120, env)
        (rank,) = payloads(assert_ok(proc), "cuda")
        assert rank["bad_fork"] == state["cuda_poisoned_fork"], (rank, state)  # the probe tells the truth
        if state["cuda_devices"] > 0:
            assert rank["cuda_sum"] == 6.0  # the forked rank initialised CUDA and computed on it
    # the launcher the tests get: with CUDA devices, one whose ranks can use them
    (rank,) = payloads(assert_ok(torchrun(PROBE, 1)), "cuda")
    if state["cuda_devices"] > 0:
        assert rank["bad_fork"] is False and rank["cuda_sum"] == 6.0, rank
