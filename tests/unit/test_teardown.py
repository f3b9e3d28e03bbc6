"""release_model_parallel_groups frees the groups of a finished layout, their gloo threads included,
even when a rotary embedding (whose lru_cache'd forward keeps `self`) and bridge's meshes still knew them."""

from __future__ import annotations

import os

import torch

from bridge.models.provider_layout import derive_layout


def _gloo_threads() -> int:
    task = f"/proc/{os.getpid()}/task"
    return sum(open(f"{task}/{t}/comm").read().startswith("pt_gloo") for t in os.listdir(task))


def test_released_groups_free_their_threads_and_the_default_group_stays():
    from megatron.core import parallel_state
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    from bridge.parallel import runtime
    from bridge.parallel.mesh import build_meshes
    from bridge.parallel.teardown import release_model_parallel_groups
    from tests.unit.test_packed_attention import tiny

    if runtime.is_initialized():
        runtime.destroy_distributed()
    layout = derive_layout(tiny(), 1)
    runtime.initialize_distributed(layout)
    try:
        default_threads = None
        for _ in range(3):  # layout after layout in one process, as a test launch runs them
            build_meshes(layout)
            rope = RotaryEmbedding(
                kv_channels=16, rotary_percent=1.0, cp_group=parallel_state.get_context_parallel_group()
            )
            rope(8)  # the class-level cache now holds this module and its group
            del rope
            with_groups = _gloo_threads()
            release_model_parallel_groups()
            default_threads = default_threads or _gloo_threads()
            assert _gloo_threads() == default_threads < with_groups, (with_groups, _gloo_threads())
            groups = torch.distributed.distributed_c10d._world.pg_map
            assert list(groups) == [torch.distributed.distributed_c10d._get_default_group()]
            assert not parallel_state.model_parallel_is_initialized()
            parallel_state.initialize_model_parallel()  # the next layout on the same default group
        x = torch.ones(2)
        torch.distributed.all_reduce(x)  # the default group still works
        assert x.tolist() == [1.0, 1.0]
    finally:
        runtime.destroy_distributed()
