"""The CPU backend: what install() changes, that it is idempotent, and that it never acts with CUDA.

The checks run in fresh interpreters: install() pushes a process-wide mode and patches torch.cuda
for good, which must not leak into the other tests of this pytest process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


# One interpreter with the backend installed runs every check below (importing Megatron-Core costs
# several seconds); each check reports PASS/FAIL on its own so the tests stay independent.
INSTALLED_CHECKS = """
import logging, sys, traceback
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(name)s %(message)s")
import torch
from bridge.parallel import cpu_backend

assert not cpu_backend.is_installed()
FIRST = cpu_backend.install()
PATCHES = cpu_backend.installed_patches()
DEPTH = torch._C._len_torch_function_stack()
SECOND = cpu_backend.install()


def idempotent():
    assert FIRST is True and SECOND is True
    assert cpu_backend.is_installed() and cpu_backend.installed_patches() == PATCHES
    assert torch._C._len_torch_function_stack() == DEPTH == 1  # the mode is pushed once


def devices():
    assert torch.zeros(2, device="cuda").device.type == "cpu"
    assert torch.tensor([1.0], device=torch.device("cuda", 0)).device.type == "cpu"
    assert torch.ones(2).cuda().device.type == "cpu"
    assert torch.ones(2).to("cuda:0").device.type == "cpu"
    assert torch.ones(2).to(0).device.type == "cpu"
    assert torch.ones(2).to("cuda", torch.float64).dtype == torch.float64
    assert torch.ones(2).to(device="cuda").device.type == "cpu"
    assert torch.ones(2).to(torch.float16).dtype == torch.float16  # dtypes untouched
    assert torch.empty(2, pin_memory=True).device.type == "cpu"
    assert torch.ones(2).pin_memory().device.type == "cpu"
    # Optimizers check param.type() for a CUDA type; conversions by CUDA type name still work.
    param = torch.nn.Parameter(torch.zeros(3))
    assert param.type() == "torch.cuda.FloatTensor", param.type()
    assert torch.zeros(1, dtype=torch.bfloat16).type() == "torch.cuda.BFloat16Tensor"
    assert torch.zeros(1).type("torch.cuda.HalfTensor").dtype == torch.float16
    assert torch.zeros(1).type(torch.cuda.DoubleTensor).dtype == torch.float64


def streams():
    assert torch.cuda.current_device() == "cpu"
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    assert stream == torch.cuda.current_stream() == torch.cuda.default_stream()  # one implicit stream
    with torch.cuda.stream(stream):
        event = stream.record_event()
    event.synchronize()
    assert event.query()
    torch.cuda.Event(enable_timing=True).record()
    torch.cuda.nvtx.range_push("x")
    torch.cuda.nvtx.range_pop()
    torch.zeros(2).record_stream(stream)
    assert torch.equal(torch.cuda.get_rng_state(), torch.get_rng_state())


def rng_tracker():
    from megatron.core import tensor_parallel
    from megatron.core.tensor_parallel import random as mp_random

    # Works without process groups when the ranks are given.
    tensor_parallel.model_parallel_cuda_manual_seed(123, tp_rank=1, ep_rank=0, etp_rank=0)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    torch.manual_seed(7)
    outside_expected = torch.rand(3)
    torch.manual_seed(7)
    with tracker.fork():  # the model-parallel stream: seed + 2718 + tp_rank
        inside = torch.rand(3)
    outside = torch.rand(3)
    assert torch.equal(inside, torch.rand(3, generator=torch.Generator().manual_seed(123 + 2718 + 1)))
    assert torch.equal(outside, outside_expected), "the fork leaves the default stream where it was"
    with tracker.fork():  # the stream continues where it stopped
        again = torch.rand(3)
    reference = torch.Generator().manual_seed(123 + 2718 + 1)
    torch.rand(3, generator=reference)
    assert torch.equal(again, torch.rand(3, generator=reference))
    with tracker.fork(mp_random.get_expert_parallel_rng_tracker_name()):
        expert = torch.rand(2)
    assert torch.equal(expert, torch.rand(2, generator=torch.Generator().manual_seed(123 + 1024)))
    # Activation recompute saves and restores all states through these helpers.
    cpu, cuda, states = mp_random._get_all_rng_states()
    first = torch.rand(2)
    mp_random._set_all_rng_states(cpu, cuda, states)
    assert torch.equal(first, torch.rand(2))


def moe():
    import numpy
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    assert moe_utils.te_general_gemm is None or callable(moe_utils.te_general_gemm)
    splits = token_dispatcher.maybe_move_tensor_to_cpu(torch.tensor([3, 1]), as_numpy=True)
    assert isinstance(splits, numpy.ndarray) and splits.tolist() == [3, 1]
    counts = moe_utils.maybe_move_tensor_to_cpu(torch.tensor([2, 2]))
    assert torch.is_tensor(counts) and counts.tolist() == [2, 2]
    assert token_dispatcher.maybe_move_tensor_to_cpu(None) is None


def one_rank_collectives():
    import tempfile

    from megatron.core.distributed import param_and_grad_buffer as buffers
    from torch.profiler import profile

    store = f"file://{tempfile.mkdtemp()}/store"
    torch.distributed.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    buf, other = torch.arange(6.0), torch.zeros(6)
    with profile(record_shapes=True) as prof:  # the shapes gloo was handed
        assert buffers.dist_reduce_scatter_func(buf, buf, group=None) is None
        buffers.dist_all_gather_func(buf, buf, group=None, async_op=True).wait()
        with torch.distributed._coalescing_manager(None, async_ops=True) as cm:  # as DDP's grad sync
            buffers.dist_reduce_scatter_func(buf, buf, group=None, async_op=True)
        cm.wait()
        buffers.dist_all_gather_func(other, buf, group=None)  # not in place: a real gather
    shapes = sorted(
        (e.key, e.input_shapes[0][0]) for e in prof.key_averages(group_by_input_shape=True)
        if e.key in ("gloo:all_reduce", "gloo:all_gather")
    )
    assert shapes == [("gloo:all_gather", 0), ("gloo:all_gather", 6), ("gloo:all_reduce", 0)], shapes
    assert torch.equal(buf, torch.arange(6.0)) and torch.equal(other, buf)
    torch.distributed.destroy_process_group()


for check in (idempotent, devices, streams, rng_tracker, moe, one_rank_collectives):
    try:
        check()
        print("PASS", check.__name__)
    except Exception:
        print("FAIL", check.__name__)
        traceback.print_exc(file=sys.stdout)
"""


@pytest.fixture(scope="module")
def installed_output() -> str:
    return run_python(INSTALLED_CHECKS)


@pytest.mark.parametrize(
    "check", ["idempotent", "devices", "streams", "rng_tracker", "moe", "one_rank_collectives"]
)
def test_installed_backend(installed_output, check):
    assert f"PASS {check}" in installed_output.splitlines(), installed_output[-4000:]


def test_one_log_line_says_what_changed(installed_output):
    lines = [
        line for line in installed_output.splitlines() if "CPU backend for Megatron-Core installed" in line
    ]
    assert len(lines) == 1, installed_output[-4000:]  # install() ran twice
    for patch in ("current_device", "RNG tracker", "MoE split sizes", "activation recompute"):
        assert patch in lines[0], lines[0]


def test_nothing_is_patched_when_cuda_is_present():
    out = run_python(
        """
        import sys, torch
        torch.cuda.is_available = lambda: True  # a machine with a GPU, as far as the guard can tell
        original = (torch.cuda.current_device, torch.cuda.Stream, torch.cuda.synchronize, torch.cuda.get_rng_state)
        import bridge
        from bridge.parallel import cpu_backend, runtime  # importing never installs anything

        assert cpu_backend.cuda_present()
        assert cpu_backend.install() is False
        assert not cpu_backend.is_installed() and cpu_backend.installed_patches() == []
        assert (torch.cuda.current_device, torch.cuda.Stream, torch.cuda.synchronize, torch.cuda.get_rng_state) == original
        assert torch._C._len_torch_function_stack() == 0
        assert "megatron.core" not in sys.modules
        print("GUARD OK")
        """
    )
    assert "GUARD OK" in out, out


@pytest.mark.parametrize("module", ["bridge", "bridge.parallel.runtime", "bridge.parallel.cpu_backend"])
def test_import_is_light_and_installs_nothing(module):
    out = run_python(
        f"""
        import sys
        import {module}
        heavy = sorted(m for m in ("torch", "megatron.core") if m in sys.modules)
        print("HEAVY", heavy)
        """
    )
    assert "HEAVY []" in out, out


def test_a_missing_call_site_is_an_error_naming_the_patch():
    # A release that moved a patched name must fail loudly, not get a patch applied to nothing.
    import types

    from bridge.parallel import cpu_backend

    fake = types.ModuleType("megatron.core.pipeline_parallel.p2p_communication")
    fake.P2PCommunicator = type("P2PCommunicator", (), {})
    with pytest.raises(cpu_backend.CpuBackendError) as err:
        cpu_backend._require(fake, "_batched_p2p_ops", "P2PCommunicator", patch="#12 (batched pipeline p2p)")
    message = str(err.value)
    assert "#12 (batched pipeline p2p)" in message
    assert "megatron.core.pipeline_parallel.p2p_communication._batched_p2p_ops" in message
    assert "P2PCommunicator," not in message  # only what is missing
    with pytest.raises(cpu_backend.CpuBackendError, match=r"P2PCommunicator\._communicate_shapes"):
        cpu_backend._require(fake.P2PCommunicator, "_communicate_shapes", patch="#12")
    cpu_backend._require(fake, "P2PCommunicator", patch="#12")  # present: nothing raised
