"""This process's rank and world size: the one home for them (pure functions, torch read lazily).

torch.distributed's values once its default process group is initialized; before that (or without
torch) torchrun's RANK / WORLD_SIZE environment, and rank 0 of a world of 1 for a plain process.
"""

from __future__ import annotations

import os
import sys

from bridge.errors import ConfigError


def _dist():
    """torch.distributed when torch is already imported and the default group is up, else None."""
    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def env_world_size() -> int:
    """WORLD_SIZE as set by torchrun, or 1 for a plain `python` process (ConfigError if malformed)."""
    value = os.environ.get("WORLD_SIZE", "1")
    try:
        world = int(value)
    except ValueError:
        world = 0
    if world < 1:
        raise ConfigError(
            f"WORLD_SIZE={value!r}: must be a positive integer (torchrun sets it); "
            "unset it for a single process or launch with torchrun --nproc_per_node=N"
        )
    return world


def env_rank() -> int:
    """RANK as set by torchrun, or 0."""
    value = os.environ.get("RANK", "0")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"RANK={value!r}: must be an integer (torchrun sets it)") from None


def node_echo_ranks(world: int, local_world: int, printing_rank: int) -> frozenset[int]:
    """The first rank of every node but `printing_rank`'s: where a line printed by one rank is echoed so
    that each node's log has it. torchrun numbers ranks node by node (`local_world` = LOCAL_WORLD_SIZE, the
    same on every node); one node, or a world that is not whole nodes, echoes nowhere."""
    if local_world >= world or world % local_world:
        return frozenset()
    return frozenset(
        node * local_world for node in range(world // local_world) if node != printing_rank // local_world
    )


def env_local_world_size() -> int:
    """LOCAL_WORLD_SIZE as set by torchrun (the ranks on this node), or the world size."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    try:
        return int(value) if value else world_size()
    except ValueError:
        raise ConfigError(f"LOCAL_WORLD_SIZE={value!r}: must be an integer (torchrun sets it)") from None


def rank() -> int:
    """Global rank: torch.distributed's once initialized, RANK before that."""
    dist = _dist()
    return dist.get_rank() if dist is not None else env_rank()


def world_size() -> int:
    """World size: torch.distributed's once initialized, WORLD_SIZE before that."""
    dist = _dist()
    return dist.get_world_size() if dist is not None else env_world_size()


def rank_world() -> tuple[int, int]:
    return rank(), world_size()


def is_rank_zero() -> bool:
    return rank() == 0


def barrier() -> None:
    """torch.distributed.barrier() when a group of more than one process is up; else nothing."""
    dist = _dist()
    if dist is not None and dist.get_world_size() > 1:
        dist.barrier()
