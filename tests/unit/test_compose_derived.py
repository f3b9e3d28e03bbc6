"""The command line and an AutoModel `--config-file` are merged first; the values derived from others
(the VPP of `layers_per_stage`, a packing recipe's packed size) are computed after, and errors name the
keys the user wrote (issue 29, item 3 and 6)."""

from __future__ import annotations

import pytest

from bridge.config.compose import compose
from bridge.config.overrides import override_keys
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from recipes import get_recipe

INTERLEAVED = """
distributed:
  pp_size: 2
  pipeline: {pp_schedule: interleaved1f1b, layers_per_stage: 1}
"""


def _file(tmp_path, text: str):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_layers_per_stage_counts_the_command_lines_num_layers(tmp_path):
    recipe = get_recipe("llama32_1b_pretrain_config")
    path = _file(tmp_path, INTERLEAVED)
    # the case: 4 layers on the command line, 1 layer per stage, pp=2 -> 2 virtual stages
    cfg, _ = compose(recipe(), config_file=path, overrides=["model.num_layers=4"])
    assert cfg.model.num_layers == 4 and cfg.model.virtual_pipeline_model_parallel_size == 2
    plan = build_plan(cfg, 2, cuda=True)
    assert plan.layout.vpp == 2 and cfg.distributed.pp_schedule == "interleaved_1f1b"
    # without the override: the recipe's 16 layers
    cfg, _ = compose(recipe(), config_file=path)
    assert cfg.model.virtual_pipeline_model_parallel_size == 16 // 2


def test_a_layers_per_stage_that_does_not_divide_the_merged_depth_names_the_file_key(tmp_path):
    path = _file(tmp_path, INTERLEAVED.replace("layers_per_stage: 1", "layers_per_stage: 3"))
    with pytest.raises(
        ConfigError, match=r"distributed.pipeline.layers_per_stage=3: model.num_layers=4 must"
    ):
        compose(
            get_recipe("llama32_1b_pretrain_config")(), config_file=path, overrides=["model.num_layers=4"]
        )
    # 6 layers from the command line divide: 6 / (2 * 3) = 1 stage per rank, so no interleaving, and the
    # interleaved schedule the file asked for is refused under the file's own key and spelling
    with pytest.raises(
        ConfigError,
        match=r"^distributed.pipeline.pp_schedule = 'interleaved1f1b': distributed.pipeline.layers_per_stage=3 "
        r"gives one stage per pipeline rank.*Fix: set distributed.pipeline.layers_per_stage",
    ):
        compose(
            get_recipe("llama32_1b_pretrain_config")(), config_file=path, overrides=["model.num_layers=6"]
        )


def test_interleaving_without_stages_names_the_automodel_key(tmp_path):
    path = _file(tmp_path, "distributed: {pp_size: 2, pipeline: {pp_schedule: interleaved1f1b}}\n")
    with pytest.raises(
        ConfigError,
        match=r"^distributed.pipeline.pp_schedule = 'interleaved1f1b': interleaving needs virtual pipeline "
        r"stages \(--config-file .*run.yaml\)\. Fix: set distributed.pipeline.layers_per_stage",
    ):
        compose(
            get_recipe("llama32_1b_pretrain_config")(), config_file=path, overrides=["model.num_layers=4"]
        )
    # a VPP from the command line is what the schedule needs
    cfg, _ = compose(
        get_recipe("llama32_1b_pretrain_config")(),
        config_file=path,
        overrides=["model.num_layers=4", "model.virtual_pipeline_model_parallel_size=2"],
    )
    assert cfg.model.virtual_pipeline_model_parallel_size == 2


def test_a_vpp_given_as_well_must_agree(tmp_path):
    path = _file(tmp_path, INTERLEAVED)
    recipe = get_recipe("llama32_1b_pretrain_config")
    same = ["model.num_layers=4", "model.virtual_pipeline_model_parallel_size=2"]
    assert (
        compose(recipe(), config_file=path, overrides=same)[0].model.virtual_pipeline_model_parallel_size == 2
    )
    with pytest.raises(
        ConfigError,
        match=r"layers_per_stage=1 gives model.virtual_pipeline_model_parallel_size=2, but "
        r"model.virtual_pipeline_model_parallel_size=4 is set too",
    ):
        compose(
            recipe(),
            config_file=path,
            overrides=["model.num_layers=4", "model.virtual_pipeline_model_parallel_size=4"],
        )


def test_packed_size_follows_the_sequence_length_unless_set():
    recipe = get_recipe("llama32_1b_peft_config")
    base = recipe()
    assert base.dataset.packed_sequence_size == base.model.seq_length > 0  # a packing recipe
    cfg, _ = compose(recipe(), overrides=["model.seq_length=64"])
    assert (cfg.model.seq_length, cfg.dataset.packed_sequence_size) == (64, 64)
    explicit = ["model.seq_length=64", f"dataset.packed_sequence_size={base.model.seq_length}"]
    cfg, _ = compose(recipe(), overrides=explicit)
    assert cfg.dataset.packed_sequence_size == base.model.seq_length  # the user's value is kept
    cfg, _ = compose(recipe(), overrides=["model.seq_length=64", "dataset.packed_sequence_size=0"])
    assert cfg.dataset.packed_sequence_size == 0
    # a recipe that does not pack stays unpacked
    cfg, _ = compose(get_recipe("llama32_1b_pretrain_config")(), overrides=["model.seq_length=64"])
    assert cfg.dataset.packed_sequence_size == 0


def test_override_keys():
    assert override_keys(["model.num_layers=4", "+logger.x=1", "~checkpoint.save"]) == {
        "model.num_layers",
        "logger.x",
        "checkpoint.save",
    }
    assert override_keys([]) == frozenset()
