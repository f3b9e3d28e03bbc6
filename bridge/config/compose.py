"""One run's config from a base tree (a recipe), an optional YAML file and command-line overrides.

Order: base -> `--config-file` (own shape or AutoModel form) -> overrides (left to right) -> the values
derived from others -> resolve_config(). The overrides win over the file by design; within the overrides each
key may appear once (a repeat, in any form: key=, +key=, ++key=, ~key, is a ConfigError naming both).
Derived after both are merged, unless the file or the command line sets them itself:
- model.virtual_pipeline_model_parallel_size from the AutoModel `distributed.pipeline.layers_per_stage`
  (against the merged model.num_layers and pipeline size);
- dataset.packed_sequence_size follows model.seq_length where the base ties them (a packing recipe's
  packed size is its sequence length), as in Megatron-Bridge.
Validation for a world size is a separate step (ConfigContainer.validate).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from bridge.checkpoint.foreign_start import check_fields_kept, foreign_start, model_with_checkpoint_fields
from bridge.checkpoint.paths import is_hf_folder
from bridge.config.container import ConfigContainer
from bridge.config.ineffective import ineffective_overrides
from bridge.config.overrides import apply_overrides, override_keys
from bridge.config.resolve import resolve_config
from bridge.config.yaml_io import merge_yaml_deferred
from bridge.errors import ConfigError
from bridge.models.hf_architecture import model_from_hf

T = TypeVar("T")


def compose(
    base: T, *, config_file: str | Path | None = None, overrides: Sequence[str] = ()
) -> tuple[T, list[str]]:
    """Returns (resolved config, warnings from the config file's translation).

    When the result starts from a Hugging Face folder (checkpoint.pretrained_checkpoint=HF_DIR), the
    base's model section is first filled from the folder's config.json and the file and overrides are
    applied again on top, so they still win (and validation checks them against the weights). A
    Megatron-LM / Megatron-Bridge checkpoint start fills it from the checkpoint the same way, and an
    override contradicting it is an error (bridge.checkpoint.foreign_start)."""
    try:
        cfg, warnings = _compose_once(base, config_file, overrides)
    except ConfigError:
        # a model field of the Hugging Face folder's provider kind that the base lacks
        # (model.freeze_vision_model on a text recipe): known once the folder fills the model section
        start = _hf_start_without_model_overrides(base, config_file, overrides)
        if start is None:
            raise
        filled = copy.deepcopy(base)
        filled.model = model_from_hf(filled.model, start)
        return _compose_once(filled, config_file, overrides)
    checkpoint = getattr(cfg, "checkpoint", None)

    if checkpoint is not None and is_hf_folder(checkpoint.pretrained_checkpoint):
        filled = copy.deepcopy(base)
        filled.model = model_from_hf(filled.model, checkpoint.pretrained_checkpoint)
        cfg, warnings = _compose_once(filled, config_file, overrides)
    elif checkpoint is not None and getattr(cfg, "model", None) is not None:
        cfg, warnings = _from_foreign_checkpoint(base, cfg, warnings, config_file, overrides)
    return cfg, warnings


def _hf_start_without_model_overrides(
    base: T, config_file: str | Path | None, overrides: Sequence[str]
) -> str | None:
    """The Hugging Face folder the run starts from, read with the model overrides left out (None: no
    model override, no such start, or the config fails without them too)."""
    rest = [o for o in overrides if not any(k.split(".")[0] == "model" for k in override_keys([o]))]
    if len(rest) == len(overrides):
        return None
    try:
        cfg, _ = _compose_once(base, config_file, rest)
    except ConfigError:
        return None
    start = getattr(getattr(cfg, "checkpoint", None), "pretrained_checkpoint", None)
    return start if is_hf_folder(start) else None


def _from_foreign_checkpoint(
    base: T, cfg: T, warnings: list[str], config_file: str | Path | None, overrides: Sequence[str]
) -> tuple[T, list[str]]:
    """A Megatron-LM / Megatron-Bridge checkpoint start: the model section is filled from it
    (bridge.checkpoint.foreign_start), then the file and overrides are applied again; they may not
    contradict it."""
    theirs = foreign_start(cfg.checkpoint)
    if theirs is None or not theirs.model_fields:
        return cfg, warnings

    filled = copy.deepcopy(base)
    filled.model = model_with_checkpoint_fields(filled.model, theirs)
    cfg, warnings = _compose_once(filled, config_file, overrides)
    check_fields_kept(cfg.model, theirs)
    return cfg, warnings


def _compose_once(base: T, config_file: str | Path | None, overrides: Sequence[str]) -> tuple[T, list[str]]:
    warnings: list[str] = []
    cfg = base
    derived = None
    if config_file is not None:
        path = Path(config_file)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(
                f"--config-file {str(path)!r}: cannot read it ({e.strerror}). Fix: give a YAML file path."
            ) from None
        cfg, warnings, derived = merge_yaml_deferred(cfg, text, source=f"--config-file {path}")
    cfg = apply_overrides(cfg, overrides, unique_keys=True)
    explicit = override_keys(overrides)
    if derived is not None:
        derived.apply(cfg, explicit)
        explicit |= derived.explicit_keys
    _packed_size_follows_seq_length(base, cfg, explicit)
    if isinstance(cfg, ConfigContainer):  # compose also serves other trees (tests' plain dataclasses)
        resolve_config(cfg)
    if getattr(cfg, "optimizer", None) is not None and getattr(cfg, "scheduler", None) is not None:
        # the command line's keys only: a config file (a saved run_config.yaml) holds every field
        warnings = [*warnings, *ineffective_overrides(cfg, override_keys(overrides))]
    return cfg, warnings


def _packed_size_follows_seq_length(base: object, cfg: object, explicit: frozenset[str]) -> None:
    """A packing base (packed_sequence_size == seq_length) keeps them tied when only the sequence length
    is changed: `model.seq_length=64` alone packs rows of 64 tokens."""
    base_model, base_data = getattr(base, "model", None), getattr(base, "dataset", None)
    model, data = getattr(cfg, "model", None), getattr(cfg, "dataset", None)
    if base_model is None or base_data is None or model is None or data is None:
        return
    packed = getattr(base_data, "packed_sequence_size", None)
    tied = bool(packed) and packed == getattr(base_model, "seq_length", None)
    if tied and "dataset.packed_sequence_size" not in explicit and data.packed_sequence_size == packed:
        data.packed_sequence_size = model.seq_length
