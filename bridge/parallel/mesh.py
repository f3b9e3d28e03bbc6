"""The run's DeviceMeshes, in Megatron-Core's rank order (docs/parallelism.md, "Rank order and meshes").

Megatron-Core orders ranks `tp-cp-ep-dp-pp` (tp fastest, pp outermost), so the dense mesh
`(pp, dp_replicate, dp_shard, cp, tp)` laid out row-major over `range(world)` holds exactly its groups:
a rank's dp group is its `(dp_replicate, dp_shard)` slice, its dp*cp group the `(dp_replicate,
dp_shard, cp)` slice. The MoE mesh `(pp, ep_shard, ep)` matches Megatron-Core's expert order
`tp-ep-dp-pp` when etp = 1 (ep_shard is then the expert data-parallel group); with etp > 1 the expert
tensor-parallel ranks sit inside ep_shard and no MoE mesh is built.

`rank_grid(layout)` is pure Python (the rank numbers per mesh axis); `build_meshes(layout)` makes the
torch DeviceMeshes once per process-group setup, after `parallel_state.initialize_model_parallel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Any


def _groups(shape: tuple[int, ...], axes: tuple[int, ...]) -> list[list[int]]:
    """Rank groups along `axes` of a row-major grid of `shape` (every other axis fixed)."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    others = [i for i in range(len(shape)) if i not in axes]
    groups = []
    for fixed in product(*(range(shape[i]) for i in others)):
        base = sum(c * strides[i] for c, i in zip(fixed, others, strict=True))
        group = [
            base + sum(c * strides[i] for c, i in zip(coord, axes, strict=True))
            for coord in product(*(range(shape[i]) for i in axes))
        ]
        groups.append(group)
    return sorted(groups)


def rank_grid(layout) -> dict[str, list[list[int]]]:
    """The rank groups of each mesh axis (and of the flattened dp / dp_cp / dp_shard_cp axes), pure Python."""
    dense = layout.dense_mesh_shape
    names = layout.dense_mesh_names
    ax = {n: i for i, n in enumerate(names)}
    out = {n: _groups(dense, (ax[n],)) for n in names}
    out["dp"] = _groups(dense, (ax["dp_replicate"], ax["dp_shard"]))
    out["dp_cp"] = _groups(dense, (ax["dp_replicate"], ax["dp_shard"], ax["cp"]))
    out["dp_shard_cp"] = _groups(dense, (ax["dp_shard"], ax["cp"]))
    if layout.etp == 1:
        moe = layout.moe_mesh_shape
        for i, n in enumerate(layout.moe_mesh_names):
            out["moe_" + n] = _groups(moe, (i,))
    return out


@dataclass
class ParallelMeshes:
    layout: Any
    dense: Any  # DeviceMesh (pp, dp_replicate, dp_shard, cp, tp)
    moe: Any  # DeviceMesh (pp, ep_shard, ep), or None when etp > 1
    # the flattened meshes as _flatten returned them (dp, dp_cp, dp_shard_cp): kept here because slicing
    # a flattened dim from the root mesh is deprecated in torch ("users need to bookkeep the flattened mesh")
    flat: dict[str, Any] = field(default_factory=dict)

    def axis(self, name: str):
        """The 1-D mesh of one axis of the dense mesh, or of a flattened one (dp, dp_cp, dp_shard_cp)."""
        return self.flat[name] if name in self.flat else self.dense[name]

    def fsdp_mesh(self):
        """What fully_shard shards over: dp_shard*cp (1-D), or (dp_replicate, dp_shard*cp) for HSDP."""
        if self.layout.dense_mesh_shape[1] > 1:
            from torch.distributed.device_mesh import DeviceMesh

            return DeviceMesh._concatenate([self.dense["dp_replicate"], self.flat["dp_shard_cp"]])
        return self.flat["dp_shard_cp"]

    def group(self, name: str):
        """The process group of one axis of the dense mesh, or of a flattened one (dp, dp_cp, dp_shard_cp)."""
        return self.axis(name).get_group()


_CACHE: dict = {}


def build_meshes(layout) -> ParallelMeshes:
    """The run's meshes (cached while the same default process group lives)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    default = torch.distributed.distributed_c10d._get_default_group()
    key = (id(default), layout.dense_mesh_shape, layout.moe_mesh_shape, layout.etp)
    if key in _CACHE:
        return _CACHE[key]
    _CACHE.clear()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dense = init_device_mesh(device, layout.dense_mesh_shape, mesh_dim_names=layout.dense_mesh_names)
    flat = {
        "dp": dense["dp_replicate", "dp_shard"]._flatten("dp"),
        "dp_cp": dense["dp_replicate", "dp_shard", "cp"]._flatten("dp_cp"),
        "dp_shard_cp": dense["dp_shard", "cp"]._flatten("dp_shard_cp"),
    }
    moe = None
    if layout.etp == 1:
        moe = init_device_mesh(device, layout.moe_mesh_shape, mesh_dim_names=layout.moe_mesh_names)
    meshes = ParallelMeshes(layout, dense, moe, flat)
    _CACHE[key] = meshes
    return meshes


def forget_meshes() -> None:
    """Drop the cached meshes (their groups are being destroyed)."""
    _CACHE.clear()


def check_against_parallel_state(meshes: ParallelMeshes) -> None:
    """Raise AssertionError when a mesh group differs from Megatron-Core's live group of this rank."""
    import torch
    from megatron.core import parallel_state as ps

    def ranks(group):
        return sorted(torch.distributed.get_process_group_ranks(group))

    pairs = {
        "tp": ps.get_tensor_model_parallel_group(),
        "cp": ps.get_context_parallel_group(),
        "pp": ps.get_pipeline_model_parallel_group(),
        "dp": ps.get_data_parallel_group(),
        "dp_cp": ps.get_data_parallel_group(with_context_parallel=True),
    }
    for name, group in pairs.items():
        mine = sorted(meshes.axis(name).mesh.flatten().tolist())
        assert mine == ranks(group), (name, mine, ranks(group))
    if meshes.moe is not None:
        for name, group in (
            ("ep", ps.get_expert_model_parallel_group()),
            ("ep_shard", ps.get_expert_data_parallel_group()),
        ):
            mine = sorted(meshes.moe[name].mesh.flatten().tolist())
            assert mine == ranks(group), (name, mine, ranks(group))
