"""ParallelLayout: derived sizes, mesh shapes, and one test per validation rule (docs/parallelism.md)."""

import subprocess
import sys

import pytest

from bridge.errors import ConfigError
from bridge.parallel.layout import ModelShape, ParallelLayout

# Llama-3.1-70B-like and Qwen3-30B-A3B-like shapes (published HF config values).
LLAMA_70B = ModelShape(
    num_layers=80,
    num_attention_heads=64,
    num_query_groups=8,
    ffn_hidden_size=28672,
    seq_length=8192,
    hidden_size=8192,
    vocab_size=128256,
)
MOE_128 = ModelShape(
    num_layers=48,
    num_attention_heads=32,
    num_query_groups=4,
    ffn_hidden_size=6144,
    num_moe_experts=128,
    moe_ffn_hidden_size=768,
    moe_router_topk=8,
    seq_length=4096,
    hidden_size=2048,
    vocab_size=151936,
)
DENSE = ModelShape(
    num_layers=8,
    num_attention_heads=8,
    num_query_groups=4,
    ffn_hidden_size=1024,
    seq_length=4096,
    hidden_size=256,
    vocab_size=1000,
)
MOE_8 = ModelShape(
    num_layers=8,
    num_attention_heads=8,
    num_query_groups=8,
    ffn_hidden_size=1024,
    num_moe_experts=8,
    moe_ffn_hidden_size=512,
    seq_length=4096,
    hidden_size=256,
    vocab_size=1000,
)
TIED = ModelShape(num_layers=8, num_attention_heads=8, share_embeddings_and_output_weights=True)


# ---- derived sizes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("world,dp,edp", [(8, 4, 1), (16, 8, 2), (32, 16, 4)])
def test_seed_example_tp2_ep8(world, dp, edp):
    # docs/parallelism.md, "Derived sizes": TP=2, CP=1, EP=8, ETP=1, PP=1 -> min_gpus 8 (not 2*8=16);
    # extra GPUs scale DP and EDP.
    layout = ParallelLayout(world, tp=2, cp=1, ep=8, etp=1, pp=1)
    assert layout.min_gpus == 8
    assert (layout.dp, layout.edp) == (dp, edp)


def test_seed_example_is_valid_with_a_moe_model_under_megatron():
    # TP=2, EP=8 on 8 GPUs is valid under strategy megatron although ep (8) does not divide dp*cp (4):
    # with Megatron-Core the expert grid folds across the TP ranks.
    layout = ParallelLayout(8, tp=2, ep=8, sequence_parallel=True, model=MOE_128)
    assert (layout.dp, layout.edp, layout.min_gpus) == (4, 1, 8)


def test_min_gpus_is_not_the_product_of_all_sizes():
    layout = ParallelLayout(16, tp=2, pp=2, cp=2, ep=4, etp=1)
    assert layout.min_gpus == 2 * max(2 * 2, 4 * 1) == 8
    assert (layout.dp, layout.edp) == (2, 2)


def test_describe_gives_the_layout_line():
    layout = ParallelLayout(4, tp=2, pp=2)
    assert layout.describe() == "TP=2 PP=2 CP=1 EP=1 ETP=1 DP=1 EDP=2 world=4"


def test_mesh_shapes_and_names():
    layout = ParallelLayout(64, tp=4, pp=2, cp=2, strategy="megatron")
    assert layout.dense_mesh_names == ("pp", "dp_replicate", "dp_shard", "cp", "tp")
    assert layout.dense_mesh_shape == (2, 1, 4, 2, 4)
    hsdp = ParallelLayout(16, strategy="fsdp2", dp_replicate_size=1)
    assert hsdp.dense_mesh_shape == (1, 1, 16, 1, 1)
    moe = ParallelLayout(32, tp=2, pp=2, ep=8, sequence_parallel=True, model=MOE_128)
    assert moe.moe_mesh_names == ("pp", "ep_shard", "ep")
    assert moe.moe_mesh_shape == (2, 2, 8)
    for lay in (layout, hsdp, moe):
        d = lay.dense_mesh_shape
        assert d[0] * d[1] * d[2] * d[3] * d[4] == lay.world_size
        m = lay.moe_mesh_shape
        assert m[0] * m[1] * m[2] == lay.world_size


def test_valid_large_layouts():
    lay = ParallelLayout(64, tp=8, pp=4, vpp=5, sequence_parallel=True, model=LLAMA_70B)
    assert (lay.dp, lay.edp, lay.min_gpus) == (2, 16, 32)
    assert lay.warnings == []


def test_warnings_tp_across_nodes_and_pp_without_interleaving():
    lay = ParallelLayout(16, tp=16, gpus_per_node=8)
    assert len(lay.warnings) == 1 and "gpus_per_node=8" in lay.warnings[0]
    lay = ParallelLayout(8, pp=4, model=DENSE)
    assert len(lay.warnings) == 1 and "interleav" in lay.warnings[0]
    assert ParallelLayout(8, pp=2).warnings == []
    assert ParallelLayout(8, pp=4, vpp=2, model=DENSE).warnings == []


def test_layout_is_frozen():
    lay = ParallelLayout(2, tp=2)
    with pytest.raises(AttributeError):
        lay.tp = 1


def test_import_does_not_load_torch():
    code = "import sys, bridge.parallel.layout; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- one case per rule: (kwargs, the field named, words of the rule) -------------------------------------

RULES = {
    "world below min_gpus": (dict(world_size=4, tp=8), "world_size", "at least min_gpus"),
    "world not divisible by tp*pp*cp": (dict(world_size=6, tp=4), "world_size", "divisible by tp*pp*cp"),
    "world not divisible by pp*ep*etp": (dict(world_size=12, ep=8), "world_size", "divisible by pp*ep*etp"),
    "sp needs tp>1": (dict(world_size=2, sequence_parallel=True), "model.sequence_parallel", "needs tp > 1"),
    "cp: seq_length % 2cp": (
        dict(world_size=2, cp=2, model=ModelShape(8, 8, seq_length=4098)),
        "model.seq_length",
        "2*cp = 4",
    ),
    "cp: packed % cp": (
        dict(world_size=4, cp=4, packed_sequence_size=4098, model=DENSE),
        "dataset.packed_sequence_size",
        "divisible by cp",
    ),
    "ep>1 on a dense model": (
        dict(world_size=2, ep=2, model=DENSE),
        "model.expert_model_parallel_size",
        "only for MoE",
    ),
    "etp>1 on a dense model": (
        dict(world_size=2, etp=2, model=DENSE),
        "model.expert_tensor_parallel_size",
        "only for MoE",
    ),
    "experts % ep": (
        dict(world_size=3, ep=3, model=MOE_8),
        "model.expert_model_parallel_size",
        "divide model.num_moe_experts (8)",
    ),
    "moe with tp>1 needs sp": (
        dict(world_size=2, tp=2, model=MOE_8),
        "model.sequence_parallel",
        "requires sequence parallelism for MoE",
    ),
    "expert ffn % etp": (
        dict(world_size=3, etp=3, model=MOE_8),
        "model.expert_tensor_parallel_size",
        "expert FFN size (512)",
    ),
    "fsdp2: ep must divide dp*cp": (
        dict(world_size=8, tp=2, ep=8, sequence_parallel=True, strategy="fsdp2", model=MOE_128),
        "model.expert_model_parallel_size",
        "dp*cp = 4*1 = 4",
    ),
    "megatron_fsdp: no pp": (
        dict(world_size=4, pp=2, strategy="megatron_fsdp"),
        "model.pipeline_model_parallel_size",
        "'megatron_fsdp' does not support pipeline",
    ),
    "megatron_fsdp: no ep": (
        dict(world_size=4, ep=2, strategy="megatron_fsdp", model=MOE_8),
        "model.expert_model_parallel_size",
        "'megatron_fsdp' does not support expert",
    ),
    "megatron_fsdp: no sp": (
        dict(world_size=4, tp=2, sequence_parallel=True, strategy="megatron_fsdp"),
        "model.sequence_parallel",
        "'megatron_fsdp' does not support sequence",
    ),
    "ddp: no tp": (
        dict(world_size=2, tp=2, strategy="ddp"),
        "model.tensor_model_parallel_size",
        "data parallelism only",
    ),
    "ddp: no pp": (
        dict(world_size=2, pp=2, strategy="ddp"),
        "model.pipeline_model_parallel_size",
        "data parallelism only",
    ),
    "ddp: no cp": (
        dict(world_size=2, cp=2, strategy="ddp"),
        "model.context_parallel_size",
        "data parallelism only",
    ),
    "ddp: no ep": (
        dict(world_size=2, ep=2, strategy="ddp"),
        "model.expert_model_parallel_size",
        "data parallelism only",
    ),
    "ddp: no dp_replicate_size": (
        dict(world_size=4, dp_replicate_size=2, strategy="ddp"),
        "distributed.dp_replicate_size",
        "fsdp2 option",
    ),
    "dp_replicate_size with megatron": (
        dict(world_size=4, dp_replicate_size=2),
        "distributed.dp_replicate_size",
        "fsdp2 option",
    ),
    "dp_replicate_size with megatron_fsdp": (
        dict(world_size=4, dp_replicate_size=2, strategy="megatron_fsdp"),
        "distributed.dp_replicate_size",
        "fsdp2 option",
    ),
    "dp_replicate_size divides dp": (
        dict(world_size=8, dp_replicate_size=3, strategy="fsdp2"),
        "distributed.dp_replicate_size",
        "must divide dp",
    ),
    "dp_replicate_size < dp": (
        dict(world_size=4, tp=2, dp_replicate_size=2, strategy="fsdp2"),
        "distributed.dp_replicate_size",
        "must be < dp (2)",
    ),
    # strategy fsdp2 (PyTorch fully_shard) shards experts over the MoE mesh: etp = 1 with ep > 1.
    "fsdp2: ep > 1 needs etp = 1": (
        dict(world_size=8, tp=2, ep=2, etp=2, sequence_parallel=True, strategy="fsdp2", model=MOE_8),
        "model.expert_tensor_parallel_size",
        "only with etp = 1",
    ),
    "heads % tp": (
        dict(world_size=3, tp=3, model=DENSE),
        "model.tensor_model_parallel_size",
        "model.num_attention_heads (8)",
    ),
    "query groups % tp": (
        dict(world_size=8, tp=8, model=DENSE),
        "model.tensor_model_parallel_size",
        "model.num_query_groups (4",
    ),
    "ffn % tp": (
        dict(world_size=2, tp=2, model=ModelShape(8, 8, ffn_hidden_size=1023)),
        "model.tensor_model_parallel_size",
        "model.ffn_hidden_size (1023)",
    ),
    "shared expert ffn % tp": (
        dict(
            world_size=2,
            tp=2,
            sequence_parallel=True,
            model=ModelShape(8, 8, num_moe_experts=4, moe_shared_expert_intermediate_size=101),
        ),
        "model.tensor_model_parallel_size",
        "moe_shared_expert_intermediate_size (101)",
    ),
    "layers % pp": (
        dict(world_size=3, pp=3, model=DENSE),
        "model.pipeline_model_parallel_size",
        "model.num_layers (8)",
    ),
    "layers % pp*vpp": (
        dict(world_size=2, pp=2, vpp=3, model=DENSE),
        "model.virtual_pipeline_model_parallel_size",
        "pp*vpp = 6",
    ),
    "vpp needs pp>1": (dict(world_size=2, vpp=2), "model.virtual_pipeline_model_parallel_size", "pp > 1"),
    "sizes are positive ints": (
        dict(world_size=2, tp=0),
        "model.tensor_model_parallel_size",
        "positive integer",
    ),
    "bool is not a size": (
        dict(world_size=2, tp=True),
        "model.tensor_model_parallel_size",
        "positive integer",
    ),
    "strategy is known": (dict(world_size=2, strategy="zero3"), "distributed.strategy", "must be one of"),
}


@pytest.mark.parametrize("kwargs,field,rule", list(RULES.values()), ids=list(RULES))
def test_rule_raises_config_error_naming_field_value_rule_fix(kwargs, field, rule):
    with pytest.raises(ConfigError) as info:
        ParallelLayout(**kwargs)
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert field in msg, msg
    assert rule in msg, msg
    assert " = " in msg and "Fix: " in msg, msg


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(world_size=4, tp=2, sequence_parallel=True),  # sp with tp
        dict(world_size=4, cp=2, packed_sequence_size=4096, model=DENSE),
        dict(world_size=4, tp=2, ep=4, sequence_parallel=True, model=MOE_8),
        dict(world_size=8, tp=2, ep=2, strategy="megatron", sequence_parallel=True, model=MOE_8),
        dict(world_size=4, tp=2, cp=2, strategy="megatron_fsdp", model=DENSE),
        dict(world_size=8, tp=2, strategy="fsdp2", sequence_parallel=True, model=DENSE),
        dict(world_size=4, strategy="fsdp2", dp_replicate_size=1),
        dict(world_size=8, strategy="fsdp2", dp_replicate_size=2),  # HSDP on PyTorch FSDP2
        dict(world_size=8, tp=2, strategy="fsdp2", dp_replicate_size=2, model=DENSE),
        dict(world_size=2, strategy="fsdp2", model=TIED),  # tied embeddings
        dict(world_size=8, tp=2, pp=2, vpp=2, strategy="fsdp2", model=DENSE),  # fsdp2 x PP/VPP
        dict(world_size=8, ep=2, strategy="fsdp2", dp_replicate_size=2, model=MOE_8),  # fsdp2 x EP
        dict(world_size=4, strategy="ddp", model=DENSE),
        dict(world_size=2, pp=2, vpp=4, model=DENSE),
    ],
)
def test_valid_layouts_do_not_raise(kwargs):
    ParallelLayout(**kwargs)


def test_model_shape_rules():
    with pytest.raises(ConfigError, match="model.num_query_groups = 3: must divide num_attention_heads"):
        ModelShape(num_layers=2, num_attention_heads=8, num_query_groups=3)
    with pytest.raises(ConfigError, match="model.num_layers = 0"):
        ModelShape(num_layers=0, num_attention_heads=8)
    with pytest.raises(ConfigError, match="model.moe_router_topk = 9"):
        ModelShape(num_layers=2, num_attention_heads=8, num_moe_experts=8, moe_router_topk=9)
    assert not ModelShape(2, 8, num_moe_experts=0).is_moe
    assert ModelShape(2, 8).query_groups == 8


def test_fsdp2_runs_pipeline_and_expert_parallelism_together():
    # PP=2 x EP=2 (ep_shard = 1) equals strategy megatron: tests/functional/test_fsdp2_moe.py
    layout = ParallelLayout(8, pp=2, ep=2, strategy="fsdp2", model=MOE_8)
    assert (layout.dp, layout.ep, layout.pp) == (4, 2, 2)


@pytest.mark.parametrize(
    "kwargs, tail",
    [
        (dict(world_size=8, pp=2, vpp=2), "world=8 VPP=2"),
        (dict(world_size=4, tp=2, sequence_parallel=True), "world=4 SP"),
        (dict(world_size=8, strategy="fsdp2", dp_replicate_size=2), "world=8 strategy=fsdp2 HSDP=2x4"),
        (dict(world_size=4, strategy="fsdp2"), "world=4 strategy=fsdp2"),
        (dict(world_size=4), "world=4"),
    ],
)
def test_the_layout_line_names_virtual_stages_sp_strategy_and_hsdp(kwargs, tail):
    assert ParallelLayout(**kwargs).describe().endswith(tail)
