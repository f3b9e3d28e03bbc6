"""Free Megatron-Core's model-parallel process groups, keeping the default group.

`parallel_state.destroy_model_parallel()` only forgets the groups: the ProcessGroup objects stay alive
while anything references them, and each gloo group keeps three threads (two work loops and its TCP
loop) that wake up on their own. A process that builds layout after layout (a test launch running
many cases, a notebook) then carries hundreds of idle groups: measured on 4 gloo ranks, 170 leftover
groups cost each rank about 18 % of a core while it sleeps, and collectives slow down with them.
Three references outlive destroy_model_parallel: a parallel_state global some releases do not reset
(`_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP` in 0.16), the class-level `lru_cache` of the rotary
embeddings' forward (it keeps every RotaryEmbedding, and the context-parallel group it holds), and
bridge's own DeviceMesh cache. A finished run's model holds groups too: pretrain() lets it go
(bridge.training.strategies.release_model).
"""

from __future__ import annotations

import gc
import sys

from bridge.parallel import mesh

# Megatron-Core classes whose forward is an lru_cache keyed by `self` (module path, class name)
_CACHED_FORWARDS = (
    ("megatron.core.models.common.embeddings.rotary_pos_embedding", "RotaryEmbedding"),
    ("megatron.core.models.common.embeddings.yarn_rotary_pos_embedding", "YarnRotaryEmbedding"),
)


def _clear_cached_forwards() -> None:
    for module_name, class_name in _CACHED_FORWARDS:
        module = sys.modules.get(module_name)
        forward = getattr(getattr(module, class_name, None), "forward", None)
        if hasattr(forward, "cache_clear"):
            forward.cache_clear()


def _forget_leftover_globals(parallel_state, process_group_type) -> None:
    """Reset the parallel_state globals that still hold a group after destroy_model_parallel."""
    for name, value in list(vars(parallel_state).items()):
        if name.lstrip("_").isupper() and isinstance(value, process_group_type):
            setattr(parallel_state, name, None)


def release_model_parallel_groups() -> None:
    """Destroy Megatron-Core's groups and bridge's meshes and free their process groups (threads
    included); the default group stays. Models built on the released groups can no longer communicate."""
    if "torch" not in sys.modules or "megatron.core.parallel_state" not in sys.modules:
        return
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if not (dist.is_available() and dist.is_initialized()):
        return
    _forget_leftover_globals(parallel_state, dist.ProcessGroup)
    _clear_cached_forwards()
    mesh.forget_meshes()
    gc.collect()  # models and optimizers of finished runs sit in reference cycles that hold groups
    default = dist.distributed_c10d._get_default_group()
    for group in list(dist.distributed_c10d._world.pg_map):
        if group is not default:
            dist.destroy_process_group(group)
