"""CPU compatibility layer: lets Megatron-Core run on a machine without CUDA (gloo backend).

Megatron-Core assumes a GPU in a handful of places. `install()` patches exactly those, once per
process, and only when `torch.cuda.is_available()` is False; with CUDA present it does nothing, so
GPU behaviour can never change. `initialize_distributed` calls it; `import bridge` never does.

Every patch (what fails on CPU, where in megatron-core 0.16.1 and 0.19.2, and the fix). Each patch
first checks that the Megatron-Core names it replaces exist in the installed release (`_require`):
a missing call site is an error naming the patch and the name, never a patch silently applied to
nothing.

| # | failure on CPU | call sites | fix |
| - | --- | --- | --- |
| 1 | `torch.cuda.current_device()` used as a device -> "Torch not compiled with CUDA" | RoPE `get_emb`, p2p shape/receive buffers, optimizer helpers | returns `"cpu"` |
| 2 | hard-coded `device="cuda"`, `.cuda()`, `.to("cuda" / int)` | `total_num_tokens` in all three pipeline schedules, optimizer scalars, `get_default_causal_mask`, fully parallel checkpoint load (exchange_utils) | a `TorchFunctionMode`, pushed once, rewrites those devices to CPU |
| 3 | `param.type()` must be `torch.cuda.FloatTensor` | distributed optimizer, FP32/Float16 optimizer wrappers | the same mode reports `torch.cuda.*` type strings for `Tensor.type()` |
| 4 | pinned host memory needs an accelerator | `pin_memory()` / `pin_memory=True` (offload paths) | the same mode drops pinning (a speed feature only) |
| 5 | `torch.cuda.current_stream/default_stream/Stream/Event/stream/set_stream`, `Tensor.record_stream` | DDP grad-sync finish (param_and_grad_buffer), MoE alltoall dispatcher D2H stream | no-op stream and event objects; `record_stream` ignored |
| 6 | `torch.cuda.synchronize()` asserts | timers, p2p, DDP, dist_checkpointing (fully parallel, async writer) | no-op (CPU ops are synchronous) |
| 7 | `torch.cuda.nvtx.*` raise "NVTX functions not installed" | pipeline utils, nvtx ranges when enabled | no-ops |
| 8 | CUDA RNG tracker: `torch.cuda.get_rng_state` asserts, so `model_parallel_cuda_manual_seed` fails and DotProductAttention's `fork()` (every forward) fails | `tensor_parallel.random` | the tracker keeps CPU generator states and forks the CPU default generator; `_get/_set_cuda_rng_state` and `torch.cuda.get/set_rng_state` use the CPU generator (activation recompute restores it) |
| 9 | MoE alltoall: `all_to_all_single(): incompatible function arguments` (split sizes stay tensors because `maybe_move_tensor_to_cpu` converts only CUDA tensors) | `moe_utils`, `token_dispatcher` | a version that also converts CPU tensors |
| 10 | `NameError: te_general_gemm` on every MoE router forward without Transformer Engine (0.16.1 only) | `moe_utils.router_gating_linear` | define the name as `None` |
| 11 | activation recompute reruns the forward inside backward, where the mode of #2 is off (torch pops a mode while it handles a call, and `torch.autograd.backward` is such a call): `get_default_causal_mask` asks for CUDA | `CheckpointFunction.backward`, `CheckpointWithoutOutput._recompute` | run them with the mode pushed again |
| 12 | interleaved 1F1B with PP=2 and `batch_p2p_comm=True`: activations and gradients land in each other's buffers (wrong losses from the 3rd microbatch; with `variable_seq_lengths` the exchanged shapes swap too). With PP=2 the previous and next stage are one rank, and `[send_prev, recv_prev, send_next, recv_next]` go to it untagged, so gloo pairs them in posting order: send_prev (a gradient) meets recv_prev (an activation) | `p2p_communication._batched_p2p_ops`, `P2PCommunicator._communicate_shapes` | the same ops, one batch, tagged by direction (forward: send_next/recv_prev, backward: send_prev/recv_next); gloo matches tags, so order no longer matters |
| 13 | (speed, not failure) the distributed optimizer with one data-parallel replica: gloo's reduce-scatter and all-gather copy the whole buffer onto itself when output and input are the same memory on a one-rank group (NCCL moves nothing then); two full copies of the gradient / parameter buffers per step, ~7% of a small model's step | `param_and_grad_buffer.dist_reduce_scatter_func` / `dist_all_gather_func` (DDP grad sync, param gather) | on a one-rank group with output = input, the same call on empty views: nothing to move, and the Work / coalescing contract is kept |

The mode forwards every torch call from its own frame; for the one C++ warning that names the
reader (a non-leaf tensor's `.grad`), it re-issues the warning from the caller's frame, so the
location and warning filters name the code that read it, not this module.

The mode lives on this thread's torch-function-mode stack (pushed by `install()`); threads that
Megatron-Core starts itself run only communication and file I/O, which need no rewriting. Inside
backward the mode is off (see #11): gradient hooks (DDP's grad sync) need no rewriting, and the one
place that reruns model code there, activation recompute, gets the mode back.
Not covered: Megatron-FSDP (builds `torch.device("cuda", current_device())`), CUDA graphs,
Transformer Engine paths. Context parallelism needs no patch: without TE it runs through bridge's sdpa
attention (bridge/models/attention.py); RoPE's per-CP-rank slice (`.cuda()`, `pin_memory=True`) is #2/#4.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from importlib.metadata import version
from typing import Any

from bridge.parallel.cpu_device_mode import push_device_mode

logger = logging.getLogger(__name__)


class CpuBackendError(RuntimeError):
    """A call site the CPU backend patches is not in the installed Megatron-Core release."""


def _require(owner: Any, *names: str, patch: str) -> None:
    missing = [name for name in names if not hasattr(owner, name)]
    if missing:
        where = getattr(owner, "__module__", None) if isinstance(owner, type) else None
        prefix = f"{where}.{owner.__qualname__}" if where else getattr(owner, "__name__", repr(owner))
        raise CpuBackendError(
            f"CPU backend patch {patch}: megatron-core {version('megatron-core')} has no "
            f"{', '.join(f'{prefix}.{n}' for n in missing)}, the call site this patch replaces. "
            "Fix: use a megatron-core release the CPU backend supports (0.16.1, 0.19.2), or run with CUDA"
        )


_lock = threading.Lock()
_installed: list[str] | None = None  # what install() changed; None = not installed
_mode: Any = None  # the pushed TorchFunctionMode (kept alive for the whole process)


def cuda_present() -> bool:
    """The guard: the CPU backend is only for machines where torch sees no CUDA device."""
    import torch

    return torch.cuda.is_available()


def is_installed() -> bool:
    return _installed is not None


def installed_patches() -> list[str]:
    """Short names of what install() changed (empty when not installed)."""
    return list(_installed or [])


def install() -> bool:
    """Patch torch.cuda / Megatron-Core for CPU once per process.

    Returns True when the CPU backend is active after the call, False when CUDA is present (nothing
    is touched then). Calling it again is harmless.
    """
    global _installed, _mode
    with _lock:
        if _installed is not None:
            return True
        if cuda_present():
            return False
        import torch

        changed = []
        changed += _patch_torch_cuda(torch)
        changed += _patch_rng_tracker(torch)
        changed += _patch_moe(torch)
        _mode, pushed = push_device_mode(torch)
        changed.append(pushed)
        changed += _patch_recompute()
        changed += _patch_pipeline_p2p(torch)
        changed += _patch_one_rank_collectives(torch)
        _installed = changed
    logger.info("CPU backend for Megatron-Core installed (no CUDA): %s", ", ".join(changed))
    return True


def on_this_thread() -> contextlib.AbstractContextManager:
    """The device mode on a thread other than the one install() ran on (the mode is per thread): a
    thread that runs model code (a server's generation loop) enters this. Nothing without the backend."""
    if _mode is None:
        return contextlib.nullcontext()
    return _mode


# -- 5, 6, 7: streams, events, synchronize, nvtx, current_device ---------------------------------


class NoopEvent:
    """Stands in for torch.cuda.Event: CPU work is already complete when the call returns."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Any) -> float:
        return 0.0


def _stream_class(torch: Any) -> type:
    """A torch.Stream on the CPU (so `Tensor.record_stream` accepts it) that never waits."""

    class NoopStream(torch.Stream):
        """Stands in for torch.cuda.Stream: one implicit stream, nothing to wait for."""

        def __new__(cls, *args: Any, **kwargs: Any):
            return super().__new__(cls, device="cpu")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def wait_stream(self, stream: Any) -> None:
            pass

        def wait_event(self, event: Any) -> None:
            pass

        def record_event(self, event: Any = None) -> NoopEvent:
            return event if event is not None else NoopEvent()

        def synchronize(self) -> None:
            pass

        def query(self) -> bool:
            return True

        # All streams are the same CPU stream, so code asking "am I on a side stream?" gets "no".
        def __eq__(self, other: object) -> bool:
            return isinstance(other, NoopStream)

        def __hash__(self) -> int:
            return 0

    return NoopStream


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _patch_torch_cuda(torch: Any) -> list[str]:
    cuda = torch.cuda
    stream_cls = _stream_class(torch)
    the_stream = stream_cls()
    cuda.current_device = lambda: "cpu"
    cuda.synchronize = _noop
    cuda.Stream = stream_cls
    cuda.Event = NoopEvent
    cuda.current_stream = lambda device=None: the_stream
    cuda.default_stream = lambda device=None: the_stream
    cuda.stream = lambda stream=None: contextlib.nullcontext()
    cuda.set_stream = _noop
    cuda.nvtx.range_push = _noop
    cuda.nvtx.range_pop = _noop
    cuda.nvtx.mark = _noop
    cuda.nvtx.range = lambda *args, **kwargs: contextlib.nullcontext()
    cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    cuda.set_rng_state = lambda new_state, device="cuda": torch.set_rng_state(new_state)
    return [
        "torch.cuda.current_device->'cpu'",
        "streams/events/synchronize/nvtx->no-ops",
        "torch.cuda.get/set_rng_state->CPU generator",
    ]


# -- 8: the model-parallel RNG tracker on the CPU generator ---------------------------------------


def _patch_rng_tracker(torch: Any) -> list[str]:
    from megatron.core.tensor_parallel import random as mp_random

    _require(
        mp_random,
        "CudaRNGStatesTracker",
        "_get_cuda_rng_state",
        "_set_cuda_rng_state",
        "_CUDA_RNG_STATE_TRACKER",
        "_CUDA_RNG_STATE_TRACKER_INITIALIZED",
        "_MODEL_PARALLEL_RNG_TRACKER_NAME",
        "initialize_rng_tracker",
        patch="#8 (RNG tracker)",
    )
    base = mp_random.CudaRNGStatesTracker

    class CpuRNGStatesTracker(base):
        """Megatron-Core's tracker, keeping CPU generator states (CPU ops draw from the CPU generator)."""

        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_:
                raise Exception(f"seed {seed} already exists")
            self.seeds_.add(seed)
            if name in self.states_:
                raise Exception(f"rng state {name} already exists")
            self.states_[name] = torch.Generator().manual_seed(seed).get_state()

        @contextlib.contextmanager
        def fork(self, name: str = mp_random._MODEL_PARALLEL_RNG_TRACKER_NAME):
            if name not in self.states_:
                raise Exception(f"rng state {name} is not added")
            outer_state, outer_name = torch.get_rng_state(), self._current_state_name
            torch.set_rng_state(self.states_[name])
            self._current_state_name = name
            try:
                yield
            finally:
                # Keep the advanced stream for the next fork, give the caller its own stream back.
                # (Megatron's warning "CPU RNG state changed within GPU RNG context" does not
                # apply: here the forked stream *is* the CPU generator.)
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(outer_state)
                self._current_state_name = outer_name

    # initialize_rng_tracker() instantiates the module-level class name, so model_parallel_cuda_manual_seed
    # (and isinstance checks in get_all_rng_states) pick up the CPU tracker.
    mp_random.CudaRNGStatesTracker = CpuRNGStatesTracker
    mp_random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    mp_random._set_cuda_rng_state = lambda new_state, *args, **kwargs: torch.set_rng_state(new_state)
    if mp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED and not isinstance(
        mp_random._CUDA_RNG_STATE_TRACKER, CpuRNGStatesTracker
    ):
        mp_random.initialize_rng_tracker(force_reset=True)
    return ["CUDA RNG tracker->CPU generator"]


# -- 9, 10: MoE dispatcher split sizes, te_general_gemm ------------------------------------------


def _patch_moe(torch: Any) -> list[str]:
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    _require(moe_utils, "maybe_move_tensor_to_cpu", patch="#9 (MoE split sizes)")
    _require(token_dispatcher, "maybe_move_tensor_to_cpu", patch="#9 (MoE split sizes)")
    _require(moe_utils, "router_gating_linear", patch="#10 (te_general_gemm)")
    changed = []
    if not hasattr(moe_utils, "te_general_gemm"):  # 0.16.1 reads the name unguarded; 0.19 defines it
        moe_utils.te_general_gemm = None
        changed.append("moe_utils.te_general_gemm=None")

    def maybe_move_tensor_to_cpu(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        # all_to_all_single wants split sizes as a sequence of ints, not a (CPU) tensor.
        if torch.is_tensor(tensor):
            tensor = tensor.detach().cpu()
            if as_numpy:
                tensor = tensor.numpy()
        return tensor

    moe_utils.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu
    token_dispatcher.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu
    changed.append("MoE split sizes->host lists")
    return changed


# -- 11: activation recompute runs model code inside backward ------------------------------------


def _patch_recompute() -> list[str]:
    from megatron.core.tensor_parallel import random as mp_random

    _require(mp_random.CheckpointFunction, "backward", patch="#11 (activation recompute)")
    _require(mp_random, "CheckpointWithoutOutput", patch="#11 (activation recompute)")
    _require(mp_random.CheckpointWithoutOutput, "_recompute", patch="#11 (activation recompute)")
    mode = _mode

    def under_mode(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with mode:  # pushing it again is harmless where it is already on the stack
                return fn(*args, **kwargs)

        return wrapped

    mp_random.CheckpointFunction.backward = staticmethod(under_mode(mp_random.CheckpointFunction.backward))
    cls = mp_random.CheckpointWithoutOutput
    cls._recompute = under_mode(cls._recompute)
    return ["activation recompute->under the device mode"]


# -- 12: batched pipeline p2p pairs messages by direction, not by posting order ------------------

# gloo matches a send with the receive of the same (peer, tag); collectives use their own slots.
P2P_TAG_FORWARD = 0x5F01  # activations: send_next -> the next stage's recv_prev
P2P_TAG_BACKWARD = 0x5F02  # gradients: send_prev -> the previous stage's recv_next


def _patch_pipeline_p2p(torch: Any) -> list[str]:
    from megatron.core.pipeline_parallel import p2p_communication as p2p

    _require(p2p, "_batched_p2p_ops", "P2PCommunicator", patch="#12 (batched pipeline p2p)")
    _require(p2p.P2PCommunicator, "_communicate_shapes", patch="#12 (batched pipeline p2p)")
    dist = torch.distributed

    def batched_p2p_ops(
        *, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group,
        prev_pipeline_rank, next_pipeline_rank,
    ) -> list:  # fmt: skip
        # Megatron-Core's op list, with tags: at PP=2 prev == next, and untagged the peer's
        # send_prev (a gradient) would fill this rank's recv_prev (an activation).
        ops = [
            dist.P2POp(op, tensor, peer, group, tag)
            for op, tensor, peer, tag in (
                (dist.isend, tensor_send_prev, prev_pipeline_rank, P2P_TAG_BACKWARD),
                (dist.irecv, tensor_recv_prev, prev_pipeline_rank, P2P_TAG_FORWARD),
                (dist.isend, tensor_send_next, next_pipeline_rank, P2P_TAG_FORWARD),
                (dist.irecv, tensor_recv_next, next_pipeline_rank, P2P_TAG_BACKWARD),
            )
            if tensor is not None
        ]
        return dist.batch_isend_irecv(ops) if ops else []

    ring_exchange_shapes = p2p.P2PCommunicator._communicate_shapes

    def communicate_shapes(self, tensor_send_next, tensor_send_prev, recv_prev, recv_next):
        # Megatron-Core's shape exchange (variable_seq_lengths) posts the same untagged batch,
        # whatever batch_p2p_comm says.
        if self.config.use_ring_exchange_p2p:
            return ring_exchange_shapes(self, tensor_send_next, tensor_send_prev, recv_prev, recv_next)

        def shape_of(tensor):
            return None if tensor is None else torch.tensor(tensor.size(), dtype=torch.int64)

        recv_prev_shape = torch.empty((3,), dtype=torch.int64) if recv_prev else None
        recv_next_shape = torch.empty((3,), dtype=torch.int64) if recv_next else None
        reqs = batched_p2p_ops(
            tensor_send_prev=shape_of(tensor_send_prev), tensor_recv_prev=recv_prev_shape,
            tensor_send_next=shape_of(tensor_send_next), tensor_recv_next=recv_next_shape,
            group=self.pp_group, prev_pipeline_rank=self.prev_rank, next_pipeline_rank=self.next_rank,
        )  # fmt: skip
        for req in reqs:
            req.wait()
        return (
            [0, 0, 0] if recv_prev_shape is None else recv_prev_shape.tolist(),
            [0, 0, 0] if recv_next_shape is None else recv_next_shape.tolist(),
        )

    # _communicate looks the function up in the module at call time.
    p2p._batched_p2p_ops = batched_p2p_ops
    p2p.P2PCommunicator._communicate_shapes = communicate_shapes
    return ["batched pipeline p2p->tagged by direction"]


def _patch_one_rank_collectives(torch: Any) -> list[str]:
    from megatron.core.distributed import param_and_grad_buffer as buffers

    patch = "#13 (one-rank in-place collectives)"
    _require(buffers, "dist_reduce_scatter_func", "dist_all_gather_func", patch=patch)

    def in_place_on_one_rank(output: Any, input: Any, group: Any) -> bool:
        return (
            output.data_ptr() == input.data_ptr()
            and output.numel() == input.numel()
            and output.dtype == input.dtype
            and torch.distributed.get_world_size(group) == 1
        )

    def skipping_self_copy(collective: Any) -> Any:
        @functools.wraps(collective)
        def wrapped(output: Any, input: Any, *args: Any, group: Any = None, **kwargs: Any) -> Any:
            if in_place_on_one_rank(output, input, group):
                # The result is already in place. The call on empty views still returns a Work for
                # async_op and still registers with an open _coalescing_manager, as the caller expects.
                output, input = output[:0], input[:0]
            return collective(output, input, *args, group=group, **kwargs)

        return wrapped

    # The bucket groups look both names up in the module at call time.
    buffers.dist_reduce_scatter_func = skipping_self_copy(buffers.dist_reduce_scatter_func)
    buffers.dist_all_gather_func = skipping_self_copy(buffers.dist_all_gather_func)
    return ["one-rank in-place reduce-scatter/all-gather->no copy"]
