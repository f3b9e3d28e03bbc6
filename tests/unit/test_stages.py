"""Uneven pipeline stages (bridge.parallel.stages): the pure split against Megatron-Core's own answers, and
one ConfigError per mistake, before launch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bridge.errors import ConfigError
from bridge.models.provider_layout import derive_layout
from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.stages import StageSplit, describe, layer_ids, parse_layout, stage_layers

LAYOUT_STRINGS = [
    "Ettt|tL",
    "Et*3|t*2L",
    "E(tt|)*2tL",
    "Et,t|t|t|tL",
    "Et|(t|)*3,tL",
    "Et*4|(t*4|)*14tL",
    "Et|t|tt|tL",
    "Et*2|tmL",
]


@pytest.mark.parametrize("text", LAYOUT_STRINGS)
def test_layout_grammar_is_megatron_cores(text):
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    char = {LayerType.embedding: "E", LayerType.loss: "L", LayerType.decoder: "t", LayerType.mtp: "m"}
    theirs = [
        "".join(char[t] for t in stage) for stage in PipelineParallelLayerLayout.parse_str_to_list(text)
    ]
    assert parse_layout(text) == theirs


# (num_layers, pp, vpp, split fields by Megatron-Core's names)
SPLITS = [
    (5, 2, None, dict(num_layers_in_first_pipeline_stage=3)),
    (5, 2, None, dict(num_layers_in_last_pipeline_stage=2)),
    (5, 3, None, dict(num_layers_in_first_pipeline_stage=1, num_layers_in_last_pipeline_stage=2)),
    (7, 4, None, dict(num_layers_in_first_pipeline_stage=1)),
    (10, 3, 2, dict(num_layers_in_first_pipeline_stage=2, num_layers_in_last_pipeline_stage=4)),
    (5, 2, None, dict(account_for_embedding_in_pipeline_split=True)),
    (6, 4, None, dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)),
    (10, 2, 2, dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)),
    (8, 2, 2, {}),
    (64, 16, None, {}),
]


def _split(fields: dict) -> StageSplit:
    return StageSplit(
        first_stage_layers=fields.get("num_layers_in_first_pipeline_stage"),
        last_stage_layers=fields.get("num_layers_in_last_pipeline_stage"),
        layout=fields.get("pipeline_model_parallel_layout"),
        embedding_in_split=fields.get("account_for_embedding_in_pipeline_split", False),
        loss_in_split=fields.get("account_for_loss_in_pipeline_split", False),
    )


@pytest.mark.parametrize("num_layers,pp,vpp,fields", SPLITS)
def test_counts_and_offsets_are_megatron_cores(num_layers, pp, vpp, fields):
    import torch
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    config = TransformerConfig(
        num_layers=num_layers,
        hidden_size=8,
        num_attention_heads=2,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
        pipeline_dtype=torch.float32,
        use_cpu_initialization=True,
        **fields,
    )
    counts = stage_layers(num_layers, pp, vpp, _split(fields))
    chunks = vpp or 1
    for r in range(pp):
        stage = [v if vpp else None for v in range(chunks)]
        assert counts[r] == tuple(get_num_layers_to_build(config, vp_stage=v, pp_rank=r) for v in stage)
        starts = [get_transformer_layer_offset(config, vp_stage=v, pp_rank=r) for v in stage]
        expected = tuple(i for s, n in zip(starts, counts[r], strict=True) for i in range(s, s + n))
        assert layer_ids(counts, r) == expected
    assert sorted(i for r in range(pp) for i in layer_ids(counts, r)) == list(range(num_layers))


@pytest.mark.parametrize(
    "text,pp,vpp", [("Ettt|tL", 2, None), ("Et|t|tt|tL", 2, 2), ("Et*4|(t*4|)*14tL", 16, None)]
)
def test_layout_counts_are_megatron_cores(text, pp, vpp):
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    theirs = PipelineParallelLayerLayout(text, pp)
    num_layers = theirs.flatten_layout.count(LayerType.decoder)
    theirs.validate_layer_layout(num_layers=num_layers, mtp_num_layers=None)
    counts = stage_layers(num_layers, pp, vpp, StageSplit(layout=text))
    assert counts == tuple(tuple(c.count(LayerType.decoder) for c in row) for row in theirs.layout)


def test_deepseek_v3_61_layers_on_16_stages():
    from bridge.models import preset

    p = preset("deepseek_v3")
    p.pipeline_model_parallel_size, p.tensor_model_parallel_size = 16, 2
    p.expert_model_parallel_size, p.sequence_parallel = 64, True
    p.pipeline_model_parallel_layout = "Et*4|(t*4|)*14tL"
    layout = derive_layout(p, 1024)
    assert describe(layout.chunk_layers()) == "+".join(["4"] * 15 + ["1"])
    assert layout.stage_layer_ids(15) == (60,)


DENSE5 = ModelShape(5, 4)
MISTAKES = {
    "no split: pp must divide": (
        dict(pp=2),
        StageSplit(),
        "model.pipeline_model_parallel_size",
        "uneven stages",
    ),
    "counts exceed": (dict(pp=2), StageSplit(first_stage_layers=6), "first_pipeline_stage", "add up"),
    "counts leave nothing": (
        dict(pp=3),
        StageSplit(first_stage_layers=2, last_stage_layers=3),
        "first_pipeline_stage",
        "at least one layer",
    ),
    "counts short": (dict(pp=2), StageSplit(first_stage_layers=2, last_stage_layers=2), "first", "add up"),
    "zero layers": (dict(pp=2), StageSplit(first_stage_layers=0), "first_pipeline_stage", "positive"),
    "middle uneven": (dict(pp=4), StageSplit(first_stage_layers=1), "first_pipeline_stage", "evenly"),
    "vpp and first": (
        dict(pp=2, vpp=2),
        StageSplit(first_stage_layers=3),
        "first_pipeline_stage",
        "divisible",
    ),
    "first needs pp": (dict(pp=1), StageSplit(first_stage_layers=3), "first_pipeline_stage", "one stage"),
    "first with account": (
        dict(pp=2),
        StageSplit(first_stage_layers=3, embedding_in_split=True),
        "account_for_embedding",
        "does not combine",
    ),
    "account not divisible": (
        dict(pp=2),
        StageSplit(loss_in_split=True, embedding_in_split=True),
        "embedding",
        "7",
    ),
    "layout with counts": (
        dict(pp=2),
        StageSplit(layout="Ettt|ttL", last_stage_layers=2),
        "layout",
        "combined",
    ),
    "layout stage count": (dict(pp=2), StageSplit(layout="Et|t|t*3L"), "layout", "multiple of"),
    "layout needs vpp": (
        dict(pp=2),
        StageSplit(layout="Et|t|tt|tL"),
        "virtual_pipeline",
        "set model.virtual",
    ),
    "layout vpp differs": (
        dict(pp=2, vpp=3),
        StageSplit(layout="Et|t|tt|tL"),
        "virtual_pipeline",
        "2 virtual",
    ),
    "layout layer count": (dict(pp=2), StageSplit(layout="Ett|ttttL"), "layout", "holds 6 decoder"),
    "layout no embedding": (dict(pp=2), StageSplit(layout="ttt|ttL"), "layout", "embedding E"),
    "layout loss twice": (dict(pp=2), StageSplit(layout="EtttL|ttL"), "layout", "loss L"),
    "layout empty stage": (dict(pp=3), StageSplit(layout="Et*5||L"), "layout", "without a decoder layer"),
    "layout grammar": (dict(pp=2), StageSplit(layout="Et*3|ttX"), "layout", "unknown layer character"),
    "layout mtp": (dict(pp=2), StageSplit(layout="Et*3|ttmL"), "layout", "MTP"),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_mistake_is_one_config_error(name):
    sizes, split, field, words = MISTAKES[name]
    with pytest.raises(ConfigError) as err:
        ParallelLayout(sizes["pp"], model=DENSE5, split=split, **sizes)
    message = str(err.value)
    assert field in message.split(":")[0] and words in message, message
    assert "Fix:" in message


def test_provider_fields_reach_the_layout():
    from bridge.models.gpt_provider import GPTModelProvider

    p = GPTModelProvider(num_layers=5, hidden_size=8, num_attention_heads=2, pipeline_model_parallel_size=2)
    p.num_layers_in_last_pipeline_stage = 1
    assert derive_layout(p, 2).chunk_layers() == ((4,), (1,))
    p.num_layers_in_last_pipeline_stage = None
    with pytest.raises(ConfigError, match="uneven stages"):
        derive_layout(p, 2)


def test_uneven_stage_shares_add_up_and_the_heaviest_stage_is_estimated():
    from bridge.models import preset
    from bridge.parallel.memory import TrainingSetup, estimate_memory, stage_memory
    from bridge.parallel.param_count import count_parameters, params_per_rank

    shape = preset("deepseek_v3").model_shape()  # 61 layers, the first 3 dense
    split = StageSplit(layout="Et*4|(t*4|)*14tL")
    layout = ParallelLayout(1024, tp=2, pp=16, ep=64, sequence_parallel=True, model=shape, split=split)
    ranks = [params_per_rank(shape, layout, s) for s in range(16)]
    assert sum(r.expert for r in ranks) * layout.ep == count_parameters(shape).experts
    # stage 0: embedding + 3 dense + 1 MoE layer; stages 1-14: 4 MoE layers; stage 15: 1 MoE layer + output
    assert ranks[1].expert == ranks[14].expert == 4 * ranks[15].expert == 4 * ranks[0].expert
    setup = TrainingSetup(seq_length=4096, global_batch_size=4096)
    per_stage = [stage_memory(shape, layout, setup, s).total for s in range(16)]
    assert estimate_memory(shape, layout, setup).total == max(per_stage)
    assert per_stage[1] > per_stage[2] > per_stage[14]  # same layers, one micro batch fewer in flight each
    # one layer on the first stage: the second (15 micro batches of 4 layers in flight) is the heaviest
    light_first = replace(layout, split=StageSplit(layout="Et|(t*4|)*14t*4L"))
    estimate = estimate_memory(shape, light_first, setup)
    assert estimate.stage == 1
    assert estimate.total == max(stage_memory(shape, light_first, setup, s).total for s in range(16))
