"""Megatron-LM / Megatron-Bridge checkpoints: their layout markers, the model fields their saved args or
run_config.yaml give (Megatron-LM's arguments.py semantics: --group-query-attention, --swiglu,
--untie-embeddings-and-output-weights, the padded vocabulary), their tracker, and a run composed on one."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from bridge.checkpoint import foreign, foreign_fields, paths
from bridge.checkpoint.foreign_load import optimizer_verdict
from bridge.errors import ConfigError

METADATA = {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
            "common_backend_version": 1}  # fmt: skip


def mlm_args(**changes) -> argparse.Namespace:
    values = dict(
        num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, group_query_attention=True,
        num_query_groups=2, kv_channels=16, normalization="RMSNorm", norm_epsilon=1e-5, swiglu=True,
        add_bias_linear=False, add_qkv_bias=False, untie_embeddings_and_output_weights=True,
        position_embedding_type="rope", rotary_base=10000, rotary_percent=1.0, use_rope_scaling=False,
        padded_vocab_size=256, seq_length=32, hidden_dropout=0.0, attention_dropout=0.0,
        tensor_model_parallel_size=2, pipeline_model_parallel_size=1, consumed_train_samples=24,
        consumed_valid_samples=8, num_experts=None,
    )  # fmt: skip
    return argparse.Namespace(**{**values, **changes})


def test_megatron_lm_args_give_the_provider_fields():
    fields = foreign_fields.fields_from_megatron_lm_args(mlm_args())
    assert fields["num_query_groups"] == 2 and fields["kv_channels"] == 16
    assert fields["gated_linear_unit"] is True and fields["activation_func"] == "silu"
    assert fields["share_embeddings_and_output_weights"] is False
    assert (
        fields["vocab_size"] == 256 and fields["should_pad_vocab"] is False
    )  # the embedding's rows as built
    assert fields["layernorm_epsilon"] == 1e-5 and fields["rope_scaling"] is False
    assert "moe_router_topk" not in fields  # a dense model
    # without --group-query-attention every head has its own K/V; without --swiglu the MLP is GeLU;
    # without --kv-channels Megatron-LM uses hidden / heads; tied embeddings by default
    plain = foreign_fields.fields_from_megatron_lm_args(
        mlm_args(group_query_attention=False, swiglu=False, kv_channels=None,
                 untie_embeddings_and_output_weights=False)
    )  # fmt: skip
    assert plain["num_query_groups"] == 4 and plain["kv_channels"] == 16
    assert plain["activation_func"] == "gelu" and plain["gated_linear_unit"] is False
    assert plain["share_embeddings_and_output_weights"] is True
    assert foreign_fields.saved_layout_sizes(mlm_args()) == (2, 1)


def test_megatron_bridge_model_section_gives_the_provider_fields():
    section = {
        "_target_": "megatron.bridge.models.llama.llama_provider.Llama32ModelProvider1B",
        "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2, "num_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "num_query_groups": None, "kv_channels": None, "ffn_hidden_size": None,
        "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False}, "normalization": "RMSNorm",
        "make_vocab_size_divisible_by": 128, "vocab_size": 250, "fp8": None, "bias_activation_fusion": True,
    }  # fmt: skip
    fields = foreign_fields.fields_from_megatron_bridge_model(section)
    assert fields["activation_func"] == "silu"
    # None: the value Megatron-Core derives
    assert (
        fields["kv_channels"] == 16 and fields["num_query_groups"] == 4 and fields["ffn_hidden_size"] == 256
    )
    assert fields["make_vocab_size_divisible_by"] == 128 and fields["vocab_size"] == 250
    assert "bias_activation_fusion" not in fields and "tensor_model_parallel_size" not in fields
    assert foreign_fields.saved_layout_sizes(section) == (1, 2)


def _folder(root, iteration: int, common: dict):
    folder = paths.checkpoint_dir(root, iteration)
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps(METADATA))
    torch.save(common, folder / "common.pt")
    return folder


def test_layouts_are_told_apart_by_their_markers(tmp_path):
    mlm = _folder(tmp_path / "mlm", 3, {"args": mlm_args(), "iteration": 3, "checkpoint_version": 3.0,
                                         "content_metadata": {"distrib_optim_sharding_type": "dp_reshardable"},
                                         "optimizer": {"param_groups": []}, "opt_param_scheduler": {}})  # fmt: skip
    theirs = foreign.describe(mlm)
    assert theirs.layout == foreign.MEGATRON_LM and theirs.fields_source == "its saved Megatron-LM args"
    assert theirs.train_state == {"iteration": 3, "consumed_train_samples": 24, "consumed_valid_samples": 8}
    assert theirs.optimizer_format == "dp_reshardable" and theirs.has_optimizer and theirs.has_scheduler
    assert theirs.model_fields["hidden_size"] == 64

    mb = _folder(tmp_path / "mb", 5, {"checkpoint_version": 3.0})
    (mb / "run_config.yaml").write_text("model:\n  _target_: x.Provider\n  num_layers: 3\n  hidden_size: 32\n"
                                        "  num_attention_heads: 2\n  tensor_model_parallel_size: 1\n"
                                        "  pipeline_model_parallel_size: 1\n")  # fmt: skip
    torch.save(
        foreign.train_state_dict({"iteration": 5, "consumed_train_samples": 40}), mb / "train_state.pt"
    )
    theirs = foreign.describe(mb)
    assert theirs.layout == foreign.MEGATRON_BRIDGE and theirs.model_fields["num_layers"] == 3
    assert theirs.train_state["iteration"] == 5 and theirs.train_state["consumed_train_samples"] == 40
    assert theirs.saved_sizes == (1, 1) and not theirs.has_optimizer

    # bridge's own: a manifest, or bridge's common state (one that lost its manifest)
    own = _folder(tmp_path / "own", 1, {"checkpoint_content": {"manifest": True}})
    assert foreign.layout_of(own) == foreign.BRIDGE and foreign.describe(own) is None
    (own / "manifest.json").write_text("{}")
    assert foreign.describe(own) is None


def test_megatron_bridge_tracker_is_read_when_there_is_no_txt_tracker(tmp_path):
    _folder(tmp_path, 7, {})
    torch.save(foreign.train_state_dict({"iteration": 7}), tmp_path / foreign.LATEST_TRAIN_STATE_FILENAME)
    assert paths.latest_iteration(tmp_path) == 7
    assert paths.complete_iterations(tmp_path) == [7]
    # a root bridge wrote follows its .txt tracker alone (a deleted .txt is not papered over)
    (paths.checkpoint_dir(tmp_path, 7) / "manifest.json").write_text("{}")
    assert paths.latest_iteration(tmp_path) is None


def test_optimizer_state_loads_only_in_a_format_and_layout_that_fit(tmp_path):
    common = {
        "args": mlm_args(),
        "optimizer": {},
        "content_metadata": {"distrib_optim_sharding_type": "dp_reshardable"},
    }
    theirs = foreign.describe(_folder(tmp_path / "a", 1, common))
    assert optimizer_verdict(theirs, (2, 1)) is None  # saved at TP=2 PP=1: DP may differ
    assert "TP=2 PP=1" in optimizer_verdict(theirs, (1, 1))
    common["content_metadata"] = {"distrib_optim_sharding_type": "fully_reshardable"}
    assert optimizer_verdict(foreign.describe(_folder(tmp_path / "b", 1, common)), (1, 1)) is None
    common["content_metadata"] = {"distrib_optim_sharding_type": "fully_sharded_model_space"}
    assert "'fully_sharded_model_space'" in optimizer_verdict(
        foreign.describe(_folder(tmp_path / "c", 1, common)), (2, 1)
    )
    assert (
        optimizer_verdict(foreign.describe(_folder(tmp_path / "d", 1, {"args": mlm_args()})), (2, 1))
        == "it holds none"
    )


def test_a_run_takes_the_model_fields_of_a_megatron_lm_checkpoint(tmp_path):
    from bridge.config.compose import compose
    from recipes.llama import llama32_1b_pretrain_config

    _folder(tmp_path, 3, {"args": mlm_args(), "iteration": 3})
    paths.write_tracker(tmp_path, 3)
    cfg, _ = compose(llama32_1b_pretrain_config(), overrides=[f"checkpoint.pretrained_checkpoint={tmp_path}"])
    assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.model.num_query_groups) == (2, 64, 2)
    assert cfg.model.share_embeddings_and_output_weights is False and cfg.model.seq_length == 32
    assert cfg.model.tensor_model_parallel_size == 1  # the layout stays the run's
    with pytest.raises(
        ConfigError, match=r"model.hidden_size = 128: the Megatron-LM checkpoint .* hidden_size=64"
    ):
        compose(llama32_1b_pretrain_config(),
                overrides=[f"checkpoint.pretrained_checkpoint={tmp_path}", "model.hidden_size=128"])  # fmt: skip
