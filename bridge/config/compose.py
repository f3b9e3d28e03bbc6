"""One run's config from a base tree (a recipe), an optional YAML file and command-line overrides.

Order: base -> `--config-file` (own shape or AutoModel form) -> overrides (left to right) -> resolve().
The overrides win over the file by design; within the overrides each key may appear once (a repeat, in
any form: key=, +key=, ++key=, ~key, is a ConfigError naming both).
Validation for a world size is a separate step (ConfigContainer.validate).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from bridge.config.overrides import apply_overrides
from bridge.config.yaml_io import merge_yaml
from bridge.errors import ConfigError

T = TypeVar("T")


def compose(
    base: T, *, config_file: str | Path | None = None, overrides: Sequence[str] = ()
) -> tuple[T, list[str]]:
    """Returns (resolved config, warnings from the config file's translation).

    When the result starts from a Hugging Face folder (checkpoint.pretrained_checkpoint=HF_DIR), the
    base's model section is first filled from the folder's config.json and the file and overrides are
    applied again on top, so they still win (and validation checks them against the weights)."""
    cfg, warnings = _compose_once(base, config_file, overrides)
    checkpoint = getattr(cfg, "checkpoint", None)
    from bridge.checkpoint.paths import is_hf_folder

    if checkpoint is not None and is_hf_folder(checkpoint.pretrained_checkpoint):
        import copy

        from bridge.models.hf_architecture import model_from_hf

        filled = copy.deepcopy(base)
        filled.model = model_from_hf(filled.model, checkpoint.pretrained_checkpoint)
        cfg, warnings = _compose_once(filled, config_file, overrides)
    return cfg, warnings


def _compose_once(base: T, config_file: str | Path | None, overrides: Sequence[str]) -> tuple[T, list[str]]:
    warnings: list[str] = []
    cfg = base
    if config_file is not None:
        path = Path(config_file)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(
                f"--config-file {str(path)!r}: cannot read it ({e.strerror}). Fix: give a YAML file path."
            ) from None
        cfg, warnings = merge_yaml(cfg, text, source=f"--config-file {path}")
    cfg = apply_overrides(cfg, overrides, unique_keys=True)
    resolve = getattr(cfg, "resolve", None)
    if resolve is not None:
        resolve()
    return cfg, warnings
