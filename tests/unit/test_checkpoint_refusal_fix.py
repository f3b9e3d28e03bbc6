"""The refusal of a checkpoint.save that holds another configuration's checkpoints (issue 43): each fix it
names in backticks, applied as written, gets past it; a changed model is not offered checkpoint.load (the
saved weights do not fit it, so that fix would only lead to the next error)."""

from __future__ import annotations

import re

import pytest

from bridge.checkpoint.paths import MANIFEST_FILENAME, RUN_CONFIG_FILENAME, TRACKER_FILENAME, checkpoint_dir
from bridge.config.checks.checkpoint import resume_plan
from bridge.config.container import ConfigContainer
from bridge.config.overrides import apply_overrides
from bridge.config.yaml_io import to_yaml
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider


def tiny(save, *overrides: str) -> ConfigContainer:
    cfg = ConfigContainer(
        model=GPTModelProvider(
            num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
        )
    )
    cfg.train.train_iters = 10
    return apply_overrides(cfg, [f"checkpoint.save={save}", *overrides])


def saved_run(root, cfg: ConfigContainer) -> None:
    """A complete checkpoint at iteration 10 as bridge publishes it: its run config, manifest and tracker."""
    folder = checkpoint_dir(root, 10)
    folder.mkdir(parents=True)
    (folder / RUN_CONFIG_FILENAME).write_text(to_yaml(cfg))
    (folder / MANIFEST_FILENAME).write_text("{}")
    (root / TRACKER_FILENAME).write_text("10")


@pytest.mark.parametrize(
    "change,load_offered",
    [("model.num_layers=4", False), ("optimizer.lr=0.001", True)],
    ids=["model-shape", "optimizer"],
)
def test_every_suggested_fix_gets_past_the_refusal(tmp_path, change, load_offered):
    root = tmp_path / "ck"
    saved_run(root, tiny(root))
    with pytest.raises(ConfigError) as err:
        resume_plan(tiny(root, change))
    message = str(err.value)
    fixes = re.findall(r"`([^`]+)`", message.split("Fix:", 1)[1])
    assert any(f.startswith("checkpoint.load=") for f in fixes) == load_offered, message
    assert fixes, message
    for fix in fixes:
        resume_plan(tiny(root, change, fix))  # raises if the fix does not get past the refusal
