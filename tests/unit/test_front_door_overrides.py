"""A key given twice on the command line is a ConfigError naming both (issue: front door, item 1).

The `--config-file` is merged first and the command-line overrides win over it by design; only a key
repeated within the command-line list (in any form: key=, +key=, ++key=, ~key) is an error.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from bridge.config.compose import compose
from bridge.config.container import ConfigContainer
from bridge.config.overrides import apply_overrides
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider
from tests.functional.launch import REPO_ROOT


def tiny() -> ConfigContainer:
    model = GPTModelProvider(
        num_layers=4, hidden_size=64, num_attention_heads=4, vocab_size=1000, seq_length=128
    )
    return ConfigContainer(model=model)


def test_same_key_twice_names_both():
    with pytest.raises(ConfigError) as err:
        compose(tiny(), overrides=["train.train_iters=5", "train.train_iters=7"])
    assert str(err.value) == (
        "train.train_iters is given twice: train.train_iters=5 and train.train_iters=7. Fix: keep one."
    )


@pytest.mark.parametrize(
    "first, second",
    [
        ("checkpoint.save=/tmp/a", "~checkpoint.save"),
        ("~train.micro_batch_size", "train.micro_batch_size=2"),
        ("+model.rope_scaling_factor=8.0", "model.rope_scaling_factor=4.0"),
        ("train.train_iters=5", "++train.train_iters=6"),
        ("+dataset.extra.a=1", "++dataset.extra.a=2"),
    ],
)
def test_every_form_of_the_same_key_counts(first, second):
    key = re.sub(r"^[+~]+", "", first).split("=", 1)[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} is given twice: {re.escape(first)} and "
                       rf"{re.escape(second)}\. Fix: keep one\.$"):  # fmt: skip
        compose(tiny(), overrides=["train.global_batch_size=8", first, "model.num_layers=2", second])


def test_different_keys_and_prefixes_are_not_repeats():
    cfg, _ = compose(
        tiny(), overrides=["train.train_iters=5", "train.micro_batch_size=1", "model.num_layers=2"]
    )
    assert (cfg.train.train_iters, cfg.model.num_layers) == (5, 2)


def test_config_file_key_is_overridden_not_a_repeat(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  train_iters: 50\n")
    cfg, warnings = compose(tiny(), config_file=path, overrides=["train.train_iters=7"])
    assert cfg.train.train_iters == 7 and warnings == []


def test_programmatic_layering_keeps_the_last_edit():
    # apply_overrides without unique_keys (recipe helpers layering lists) still lets a later edit win.
    cfg = apply_overrides(tiny(), ["train.train_iters=5", "train.train_iters=7"])
    assert cfg.train.train_iters == 7
    with pytest.raises(ConfigError, match="given twice"):
        apply_overrides(tiny(), ["train.train_iters=5", "train.train_iters=7"], unique_keys=True)


def test_run_recipe_exits_2_with_the_message(capsys):
    spec = importlib.util.spec_from_file_location("run_recipe", REPO_ROOT / "scripts/training/run_recipe.py")
    run_recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_recipe)
    argv = [
        "--recipe",
        "llama32_1b_pretrain_config",
        "--dry-run",
        "train.train_iters=5",
        "train.train_iters=7",
    ]
    assert run_recipe.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "error: train.train_iters is given twice: train.train_iters=5 and train.train_iters=7. Fix: keep one."
        in err
    )
