"""Dotted overrides (Hydra grammar through OmegaConf) on a small tree and on the real ConfigContainer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from bridge.config.container import ConfigContainer
from bridge.config.overrides import apply_overrides
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider


@dataclass
class Inner:
    num_layers: int = 2
    lr: float = 1e-3
    name: str | None = None
    paths: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    flag: bool = False


@dataclass
class Tree:
    inner: Inner = field(default_factory=Inner)
    anything: Any = None


def tiny_container() -> ConfigContainer:
    model = GPTModelProvider(
        num_layers=4, hidden_size=64, num_attention_heads=4, vocab_size=1000, seq_length=128
    )
    return ConfigContainer(model=model)


# ---- set ---------------------------------------------------------------------------------------


def test_set_values_of_every_kind():
    t = apply_overrides(
        Tree(),
        [
            "inner.num_layers=4",
            "inner.lr=1",
            "inner.name=run-1",
            "inner.paths=[a,b]",
            "inner.flag=True",
            "inner.extra={x: 1, y: [2, 3]}",
        ],
    )
    assert t.inner == Inner(
        num_layers=4, lr=1.0, name="run-1", paths=["a", "b"], extra={"x": 1, "y": [2, 3]}, flag=True
    )
    assert isinstance(t.inner.lr, float)  # an int given for a float field becomes a float


def test_input_tree_is_not_changed():
    tree = Tree()
    apply_overrides(tree, ["inner.num_layers=9"])
    assert tree.inner.num_layers == 2


def test_dict_value_merges_into_a_section():
    t = apply_overrides(Tree(), ["inner={num_layers: 7}"])
    assert t.inner.num_layers == 7 and t.inner.lr == 1e-3


def test_null_for_optional_field():
    t = apply_overrides(Tree(), ["inner.name=x", "inner.name=null"])
    assert t.inner.name is None


def test_quoted_string_with_commas():
    cfg = apply_overrides(tiny_container(), ['dataset.split="98,1,1"'])
    assert cfg.dataset.split == "98,1,1"


def test_real_container_overrides_and_later_wins():
    cfg = apply_overrides(
        tiny_container(),
        [
            "model.tensor_model_parallel_size=2",
            "model.sequence_parallel=True",
            "train.train_iters=3",
            "train.train_iters=5",
            "optimizer.lr=1e-4",
            "checkpoint.save=/tmp/ckpt",
        ],
    )
    assert cfg.model.tensor_model_parallel_size == 2 and cfg.model.sequence_parallel is True
    assert cfg.train.train_iters == 5
    assert cfg.optimizer.lr == pytest.approx(1e-4)
    assert cfg.checkpoint.save == "/tmp/ckpt"
    assert isinstance(cfg, ConfigContainer) and isinstance(cfg.model, GPTModelProvider)


# ---- add / delete --------------------------------------------------------------------------------


def test_add_key_to_dict_field_and_to_unset_any_field():
    t = apply_overrides(Tree(), ["+inner.extra.factor=8.0", "+anything.dim=4"])
    assert t.inner.extra == {"factor": 8.0}
    assert t.anything == {"dim": 4}


def test_add_existing_key_fails_and_force_add_sets():
    with pytest.raises(
        ConfigError, match=r"cannot add inner.num_layers: it already exists.*use inner.num_layers="
    ):
        apply_overrides(Tree(), ["+inner.num_layers=3"])
    assert apply_overrides(Tree(), ["++inner.num_layers=3"]).inner.num_layers == 3
    assert apply_overrides(Tree(), ["++inner.extra.k=1"]).inner.extra == {"k": 1}


def test_add_field_to_section_fails_with_suggestion():
    with pytest.raises(ConfigError, match=r"unknown key inner.num_layer\b.*Did you mean inner.num_layers"):
        apply_overrides(Tree(), ["+inner.num_layer=3"])


def test_set_new_key_in_dict_field_says_to_use_plus():
    with pytest.raises(ConfigError, match=r"To add a new key use \+inner.extra.k=..."):
        apply_overrides(Tree(), ["inner.extra.k=1"])


def test_delete_resets_section_field_to_dataclass_default_and_drops_dict_key():
    t = apply_overrides(
        Tree(), ["inner.num_layers=9", "inner.name=x", "+inner.extra.a=1", "+inner.extra.b=2"]
    )
    t = apply_overrides(t, ["~inner.num_layers", "~inner.name", "~inner.extra.a"])
    assert t.inner.num_layers == 2 and t.inner.name is None and t.inner.extra == {"b": 2}


def test_delete_on_container_resets_to_section_default_not_recipe_value():
    cfg = tiny_container()
    cfg.train.micro_batch_size = 4
    cfg.checkpoint.save = "/somewhere"
    cfg = apply_overrides(cfg, ["~train.micro_batch_size", "~checkpoint.save"])
    assert cfg.train.micro_batch_size == 1 and cfg.checkpoint.save is None


def test_conditional_delete_checks_the_value():
    assert apply_overrides(Tree(), ["~inner.num_layers=2"]).inner.num_layers == 2
    with pytest.raises(ConfigError, match=r"deletes only when the current value matches, but it is 2"):
        apply_overrides(Tree(), ["~inner.num_layers=5"])


# ---- errors ------------------------------------------------------------------------------------


def test_unknown_key_suggests_closest_keys():
    with pytest.raises(ConfigError) as err:
        apply_overrides(tiny_container(), ["model.num_layer=3"])
    msg = str(err.value)
    assert "override 'model.num_layer=3'" in msg and "Did you mean model.num_layers" in msg


def test_unknown_key_without_section_suggests_by_leaf():
    with pytest.raises(ConfigError, match=r"Did you mean .*train.train_iters"):
        apply_overrides(tiny_container(), ["train_iters=3"])


def test_unknown_section():
    with pytest.raises(ConfigError, match=r"unknown key trian.train_iters.*Did you mean train.train_iters"):
        apply_overrides(tiny_container(), ["trian.train_iters=3"])


def test_type_error_names_key_value_and_expected_type():
    with pytest.raises(ConfigError) as err:
        apply_overrides(tiny_container(), ["model.num_layers=two"])
    msg = str(err.value)
    assert "model.num_layers expects int, got 'two' (str)" in msg and "current value: 4" in msg


@pytest.mark.parametrize(
    "override, expected",
    [
        ("train.micro_batch_size=1.5", "train.micro_batch_size expects int"),
        ("train.train_iters=null", "train.train_iters expects int"),
        ("optimizer.lr=fast", "optimizer.lr expects float"),
        ("model.sequence_parallel=maybe", "model.sequence_parallel expects bool"),
        ("dataset.data_paths=5", "dataset.data_paths expects list[str]"),
        ("train={train_iters: x}", "train.train_iters expects int"),
    ],
)
def test_type_errors(override, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        apply_overrides(tiny_container(), [override])


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model.num_layers", r"not valid override syntax"),
        ("dataset.split=98,1,1", r"Hydra sweep.*quote it"),
        ("model@pkg.num_layers=2", r"config groups and packages"),
    ],
)
def test_grammar_errors(override, expected):
    with pytest.raises(ConfigError, match=expected):
        apply_overrides(tiny_container(), [override])


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        apply_overrides(tiny_container(), ["nope=1"])
