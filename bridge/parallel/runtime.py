"""Process groups for a ParallelLayout: torch.distributed + Megatron-Core's model-parallel groups.

torch and megatron.core are imported inside the functions, so importing this module stays cheap.
Under torchrun the rendezvous comes from RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT;
without it, a single process sets up a local rendezvous on a free port. With CUDA: NCCL and one
device per local rank. Without: gloo and the CPU backend (bridge.parallel.cpu_backend).
"""

from __future__ import annotations

import datetime
import logging
import os
import random
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.errors import ConfigError
from bridge.parallel import cpu_backend, quiet_warnings
from bridge.parallel.megatron_import import import_megatron
from bridge.parallel.ranks import env_world_size, rank
from bridge.parallel.teardown import release_model_parallel_groups

if TYPE_CHECKING:
    from bridge.parallel.layout import ParallelLayout

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Active:
    layout: ParallelLayout
    seed: int


_active: _Active | None = None
_generation = 0  # process groups created by this process so far


def _next_generation() -> int:
    global _generation
    _generation += 1
    return _generation - 1


def is_initialized() -> bool:
    """True while process groups made by initialize_distributed are alive."""
    global _active
    if _active is None:
        return False
    # Someone may have torn Megatron-Core's groups down directly: then we are not initialized.
    if not _megatron_groups_alive():
        _active = None
        return False
    return True


def quiet_known_warnings() -> None:
    """Hide the third-party warnings listed in bridge.parallel.quiet_warnings (CPU-only ones without
    CUDA). Call before Megatron-Core is imported: some of them fire at import time. Idempotent."""
    import torch

    quiet_warnings.install(cpu=not torch.cuda.is_available())


class RankZeroFilter(logging.Filter):
    """A handler filter: every rank computes the same informational lines, so only rank 0 prints them
    (as Megatron's print_rank_0); errors show from any rank. Loggers in `own_rank` choose their rank
    themselves (the training loop prints iteration lines on the last pipeline stage) and pass."""

    def __init__(self, own_rank: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.own_rank = own_rank

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.name in self.own_rank or rank() == 0


# bridge loggers whose INFO records are detail (the CPU backend's list of patches): entry points show
# them with -v / logger.verbose only
DETAIL_LOGGERS = ("bridge.parallel.cpu_backend",)


def set_verbosity(verbose: bool) -> None:
    """Quiet by default: without `verbose` the detail loggers show warnings and errors only."""
    for name in DETAIL_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)


def log_on_rank_zero(handler: logging.Handler, own_rank: tuple[str, ...] = ()) -> None:
    """Add a RankZeroFilter to `handler` (once)."""
    if not any(isinstance(f, RankZeroFilter) for f in handler.filters):
        handler.addFilter(RankZeroFilter(own_rank))


def initialize_distributed(layout: ParallelLayout, *, seed: int = 1234, timeout_minutes: int = 10) -> None:
    """Create torch.distributed and Megatron-Core's groups for `layout`, then seed every RNG.

    Idempotent: while initialized, a layout with the same process-group sizes (GROUP_FIELDS) and the
    same seed is a no-op; other sizes or another seed raise ConfigError (call destroy_distributed()
    first). If only Megatron-Core's groups were destroyed, a new layout is built on the existing
    torch.distributed process group.
    """
    global _active
    if is_initialized():
        _check_same(layout, seed)
        return

    import torch
    import torch.distributed as dist

    world = env_world_size()
    if dist.is_initialized():
        world = dist.get_world_size()
    if layout.world_size != world:
        raise ConfigError(
            f"layout.world_size={layout.world_size} but this run has {world} process(es): they must match; "
            f"launch with torchrun --nproc_per_node={layout.world_size} (or build the layout for world_size={world})"
        )

    if "megatron.core.parallel_state" in sys.modules:
        from megatron.core import parallel_state

        if parallel_state.model_parallel_is_initialized():
            raise ConfigError(
                f"layout={layout.describe()} but Megatron-Core's model-parallel groups already exist, made "
                "outside bridge.parallel.runtime: call bridge.parallel.runtime.destroy_distributed() "
                "(or parallel_state.destroy_model_parallel()) first"
            )

    is_rank_zero = rank() == 0
    if is_rank_zero:
        _make_visible(logging.getLogger("bridge"))

    quiet_known_warnings()  # before cpu_backend.install() and parallel_state import Megatron-Core

    import_megatron()  # torch.compile deferred to first use: inductor's compiler is not imported per rank
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        cpu_backend.install()

    if not dist.is_initialized():
        timeout = datetime.timedelta(minutes=timeout_minutes)
        backend = "nccl" if use_cuda else "gloo"
        if "RANK" in os.environ:
            # torchrun's env:// rendezvous. Each initialization in this process gets its own key
            # prefix: after destroy_distributed() the store still holds the previous group's
            # addresses, and gloo would hang connecting to them.
            store, _, _ = next(dist.rendezvous("env://", timeout=timeout))
            # torchrun's agent keeps its store across worker restarts (--max-restarts): the attempt
            # number keeps a restarted worker off the addresses its killed predecessors published
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            store = dist.PrefixStore(f"bridge_init_{attempt}_{_next_generation()}", store)
            dist.init_process_group(
                backend=backend, store=store, rank=int(os.environ["RANK"]), world_size=world, timeout=timeout
            )
        else:
            # A plain `python` process: a local rendezvous of one; port 0 lets the OS pick a free
            # port at bind time (no race with other processes picking ports).
            store = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, timeout=timeout)
            dist.init_process_group(backend=backend, store=store, rank=0, world_size=1, timeout=timeout)

    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        virtual_pipeline_model_parallel_size=layout.vpp,
        context_parallel_size=layout.cp,
        expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=layout.etp,
        distributed_timeout_minutes=timeout_minutes,
    )
    _seed_everything(seed)
    _active = _Active(layout=layout, seed=seed)

    if is_rank_zero:
        logger.info("parallel layout: %s", layout.describe())
        for warning in layout.warnings:
            logger.warning("parallel layout: %s", warning)


def destroy_distributed() -> None:
    """Tear down Megatron-Core's groups and the default process group (no-op when not initialized)."""
    global _active
    _active = None
    if "torch" not in sys.modules:
        return
    import torch.distributed as dist

    release_model_parallel_groups()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# The layout fields that decide the process groups; the others (strategy, sequence_parallel, model
# shape, packing, gpus_per_node) do not, so a layout differing only there reuses the groups.
GROUP_FIELDS = ("world_size", "tp", "pp", "vpp", "cp", "ep", "etp")


def _check_same(layout: ParallelLayout, seed: int) -> None:
    assert _active is not None
    built = _active.layout
    for field in GROUP_FIELDS:
        if getattr(layout, field) != getattr(built, field):
            raise ConfigError(
                f"layout.{field}={getattr(layout, field)!r} but the process groups were built with "
                f"{field}={getattr(built, field)!r} ({built.describe()}): one layout per initialization; "
                "call bridge.parallel.runtime.destroy_distributed() first, or use the same sizes"
            )
    if seed != _active.seed:
        raise ConfigError(
            f"seed={seed} but the process groups were initialized with seed={_active.seed}: reseeding "
            "would silently change the random streams; pass the same seed or call destroy_distributed() first"
        )


def _megatron_groups_alive() -> bool:
    if "torch" not in sys.modules or "megatron.core.parallel_state" not in sys.modules:
        return False
    import torch.distributed as dist
    from megatron.core import parallel_state

    return dist.is_initialized() and parallel_state.model_parallel_is_initialized()


def _seed_everything(seed: int) -> None:
    """Seed Python, numpy, torch and Megatron-Core's tracker (which adds per-TP/EP-rank streams).

    Each pipeline stage gets seed + 100 * pp_rank, as Megatron-LM and Megatron-Bridge do: with one
    seed, every stage would draw the same initial weights for its layers.
    """
    import numpy as np
    import torch
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    seed = seed + 100 * parallel_state.get_pipeline_model_parallel_rank()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)


class _FallbackHandler(logging.StreamHandler):
    """Prints bridge's records only while the application has configured no logging of its own."""

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


def _make_visible(bridge_logger: logging.Logger) -> None:
    """The layout line is a run's success signal: print INFO to stdout when no logging is configured."""
    if bridge_logger.hasHandlers():
        return  # the application configured logging (or this ran before): respect it
    for name in DETAIL_LOGGERS:  # detail stays off in library use unless set_verbosity(True) asked for it
        detail = logging.getLogger(name)
        if detail.level == logging.NOTSET:
            detail.setLevel(logging.WARNING)
    handler = _FallbackHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[bridge] %(message)s"))
    bridge_logger.addHandler(handler)
    if bridge_logger.level == logging.NOTSET or bridge_logger.level > logging.INFO:
        bridge_logger.setLevel(logging.INFO)
