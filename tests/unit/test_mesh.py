"""bridge.parallel.mesh.rank_grid: the DeviceMesh axes hold Megatron-Core's process groups (rank order
tp-cp-ep-dp-pp), checked against Megatron-Core's own RankGenerator without any process group."""

import pytest

from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.mesh import rank_grid

MOE = ModelShape(
    num_layers=4, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=64, num_moe_experts=8
)
DENSE = ModelShape(num_layers=4, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=64)

LAYOUTS = [
    dict(world_size=4, strategy="fsdp2", model=DENSE),
    dict(world_size=4, strategy="fsdp2", dp_replicate_size=2, model=DENSE),
    dict(world_size=8, tp=2, strategy="fsdp2", dp_replicate_size=2, model=DENSE),
    dict(world_size=16, tp=2, cp=2, strategy="fsdp2", dp_replicate_size=2, model=DENSE),
    dict(world_size=16, tp=2, pp=2, cp=2, model=DENSE),
    dict(world_size=16, tp=2, pp=2, ep=4, sequence_parallel=True, model=MOE),
    dict(world_size=8, ep=2, pp=2, model=MOE),
]


def _megatron_groups(layout: ParallelLayout) -> dict[str, list[list[int]]]:
    from megatron.core.parallel_state import RankGenerator

    order = "tp-cp-ep-dp-pp"
    dense = RankGenerator(tp=layout.tp, ep=1, dp=layout.dp, pp=layout.pp, cp=layout.cp, order=order)
    expert = RankGenerator(tp=layout.etp, ep=layout.ep, dp=layout.edp, pp=layout.pp, cp=1, order=order)
    groups = {
        "tp": dense.get_ranks("tp"),
        "cp": dense.get_ranks("cp"),
        "pp": dense.get_ranks("pp"),
        "dp": dense.get_ranks("dp"),
        "dp_cp": dense.get_ranks("dp-cp"),
        "moe_ep": expert.get_ranks("ep"),
        "moe_ep_shard": expert.get_ranks("dp"),
        "moe_pp": expert.get_ranks("pp"),
    }
    return {k: sorted(sorted(g) for g in v) for k, v in groups.items()}


@pytest.mark.parametrize("kwargs", LAYOUTS, ids=lambda k: ParallelLayout(**k).describe())
def test_mesh_axes_are_megatron_core_groups(kwargs):
    layout = ParallelLayout(**kwargs)
    grid = rank_grid(layout)
    for name, groups in _megatron_groups(layout).items():
        assert grid[name] == groups, name


def test_hsdp_axes_split_the_dp_group():
    layout = ParallelLayout(world_size=8, tp=2, strategy="fsdp2", dp_replicate_size=2, model=DENSE)
    grid = rank_grid(layout)
    assert grid["dp"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert grid["dp_replicate"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert grid["dp_shard"] == grid["dp_shard_cp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_no_moe_mesh_with_expert_tensor_parallelism():
    layout = ParallelLayout(world_size=8, tp=2, ep=2, etp=2, sequence_parallel=True, model=MOE)
    assert "moe_ep" not in rank_grid(layout)
