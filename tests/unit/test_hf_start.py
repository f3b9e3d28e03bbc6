"""A Hugging Face folder as checkpoint.pretrained_checkpoint: the model section follows its config.json,
overrides still apply and are checked against it, the tokenizer follows it."""

from __future__ import annotations

import pytest

from bridge.config.compose import compose
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from recipes import get_recipe
from tests.finetune_fixtures import make_tiny_llama, write_chat_jsonl


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_start")
    write_chat_jsonl(root / "chat.jsonl", 4)
    return make_tiny_llama(root / "hf"), root / "chat.jsonl"


def _compose(hf_dir, data, *overrides):
    base = [f"checkpoint.pretrained_checkpoint={hf_dir}", "dataset.kind=chat", f"dataset.data_paths=[{data}]"]
    return compose(get_recipe("llama32_1b_peft_config")(), overrides=[*base, *overrides])[0]


def test_model_section_follows_config_json_and_recipe_keeps_training_choices(hf):
    hf_dir, data = hf
    cfg = _compose(hf_dir, data, "model.tensor_model_parallel_size=2")
    m = cfg.model
    # config.json (tests/finetune_fixtures.TINY_LLAMA), not the recipe's Llama 3.2 1B
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups) == (
        2, 64, 96, 4, 2,
    )  # fmt: skip
    assert (m.vocab_size, m.share_embeddings_and_output_weights, m.rotary_base) == (60, False, 10000)
    assert m.rope_scaling is False  # the recipe's llama3 RoPE scaling is not in this config.json
    # the recipe's and the command line's training choices stay
    assert (m.seq_length, m.tensor_model_parallel_size) == (4096, 2)
    assert cfg.tokenizer.tokenizer_model == str(hf_dir)  # null follows the folder
    plan = build_plan(cfg, 2, cuda=False)
    assert plan.provider.hidden_size == 64


def test_an_override_that_contradicts_the_weights_is_refused(hf):
    hf_dir, data = hf
    cfg = _compose(hf_dir, data, "model.num_query_groups=4")
    with pytest.raises(
        ConfigError, match=r"model.num_query_groups = 4: .*config.json gives num_query_groups=2"
    ):
        build_plan(cfg, 1, cuda=False)


def test_finetune_needs_a_starting_point():
    from bridge.config.finetune_rules import check_finetune_start

    with pytest.raises(ConfigError, match=r"finetuning starts from trained weights"):
        check_finetune_start(get_recipe("llama32_1b_sft_config")())


def test_a_partly_dense_moe_folder_starts_a_finetune(tmp_path):
    # Qwen3-MoE with mlp_only_layers: the per-layer moe_layer_freq list goes through the config tree
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functional" / "workers"))
    from convert_models import save_hf_model

    folder = tmp_path / "qwen3_moe"
    save_hf_model("qwen3_moe", folder)
    write_chat_jsonl(tmp_path / "chat.jsonl", 4)
    overrides = [
        f"checkpoint.pretrained_checkpoint={folder}", "dataset.kind=chat", f"dataset.data_paths=[{tmp_path}/chat.jsonl]",
        "model.expert_model_parallel_size=1", "model.tensor_model_parallel_size=1", "model.sequence_parallel=False",
        f"tokenizer.tokenizer_model={Path(make_tiny_llama(tmp_path / 'tok'))}",
    ]  # fmt: skip
    cfg = compose(get_recipe("qwen3_30b_a3b_sft_config")(), overrides=overrides)[0]
    assert list(cfg.model.moe_layer_freq) == [1, 0]  # layer 0 MoE, layer 1 dense (convert_models)
    plan = build_plan(cfg, 1, cuda=False)
    assert list(plan.provider.moe_layer_freq) == [1, 0]
    from bridge.config.container import ConfigContainer

    assert list(ConfigContainer.from_yaml(cfg.to_yaml()).model.moe_layer_freq) == [1, 0]  # run_config.yaml
