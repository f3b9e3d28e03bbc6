"""The `checkpoint` section: format, save / load directories, the step to resume, retention; and where
a run starts (resume_plan: checkpoint.load, a re-run resuming its own checkpoint.save, or from scratch)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.checkpoint.overwrite import overwrite_marker
from bridge.checkpoint.paths import RUN_CONFIG_FILENAME, checkpoint_dir, complete_iterations, tracked_or_none
from bridge.config import sections as S
from bridge.config.checks.rules import one_of, positive
from bridge.config.consolidated import consolidated_source
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.sections import CheckpointConfig


def check_checkpoint(cfg: ConfigContainer) -> None:
    c = cfg.checkpoint
    one_of("checkpoint.ckpt_format", c.ckpt_format, S.CKPT_FORMATS)
    positive("checkpoint.save_interval", c.save_interval, zero_ok=True, none_ok=True)
    if c.save_interval and not c.save:
        raise config_error(
            "checkpoint.save_interval",
            c.save_interval,
            "periodic saves need a directory, but checkpoint.save is not set",
            "set checkpoint.save=/path/to/dir, or checkpoint.save_interval=0 to not save",
        )
    if c.save_consolidated:
        if not c.save:
            raise config_error(
                "checkpoint.save_consolidated",
                True,
                "writes a Hugging Face copy inside each saved checkpoint, but checkpoint.save is not set",
                "set checkpoint.save=/path/to/dir, or checkpoint.save_consolidated=false",
            )

        consolidated_source(cfg)  # a ConfigError when the copy's architecture is unknown
    elif c.hf_architecture:  # the architecture the run's checkpoints export as (convert_checkpoint.py)
        consolidated_source(cfg)
    if c.save and os.path.exists(c.save) and not os.path.isdir(c.save):
        raise config_error(
            "checkpoint.save", c.save, "exists and is not a directory", "give a directory path"
        )
    if c.load and not os.path.isdir(c.load):
        raise config_error(
            "checkpoint.load",
            c.load,
            "directory does not exist",
            "give an existing checkpoint directory, or checkpoint.load=null to start from scratch",
        )
    if c.pretrained_checkpoint and not os.path.exists(c.pretrained_checkpoint):
        raise config_error(
            "checkpoint.pretrained_checkpoint",
            c.pretrained_checkpoint,
            "does not exist",
            "give an existing checkpoint (e.g. one written by scripts/conversion/convert_checkpoint.py)",
        )
    if c.ckpt_step is not None:
        check_ckpt_step(c)
    if c.most_recent_k != -1 and c.most_recent_k < 1:
        raise config_error(
            "checkpoint.most_recent_k", c.most_recent_k, "must be -1 (keep all) or >= 1", "use -1 or a count"
        )


def check_ckpt_step(c: CheckpointConfig) -> None:
    """checkpoint.ckpt_step picks an existing iter_* folder of the checkpoint.load root."""
    positive("checkpoint.ckpt_step", c.ckpt_step, zero_ok=True)
    if not c.load:
        raise config_error(
            "checkpoint.ckpt_step",
            c.ckpt_step,
            "picks an iteration of checkpoint.load, which is not set",
            "set checkpoint.load to the checkpoint root",
        )
    name = os.path.basename(os.path.normpath(c.load))
    if name.startswith("iter_") and name[5:].isdigit():
        raise config_error(
            "checkpoint.ckpt_step",
            c.ckpt_step,
            f"checkpoint.load already names one checkpoint ({name})",
            "set checkpoint.load to the root that holds the iter_* folders, or drop checkpoint.ckpt_step",
        )
    folder = os.path.join(c.load, f"iter_{c.ckpt_step:07d}")
    if not os.path.isdir(folder):
        have = sorted(int(n[5:]) for n in os.listdir(c.load) if n.startswith("iter_") and n[5:].isdigit())
        raise config_error(
            "checkpoint.ckpt_step",
            c.ckpt_step,
            f"{folder} does not exist (checkpoints in {c.load}: {', '.join(map(str, have)) or 'none'})",
            "pick one of those iterations",
        )


# What a resume may change without the checkpoint belonging to another run: how long to train and
# when to stop, where to save and load, what to log, profile or evaluate, and process settings.
RESUME_FREE_FIELDS: dict[str, tuple[str, ...] | None] = {
    "checkpoint": None,  # None: the whole section
    "logger": None,
    "profiling": None,
    "ft": None,
    "straggler": None,
    "validation": None,
    "train": (
        "train_iters",
        "exit_interval",
        "exit_signal",
        "exit_duration_in_mins",
        "manual_gc",
        "manual_gc_interval",
        "manual_gc_eval",
        "check_memory",
    ),  # fmt: skip
    "dataset": ("num_workers", "cache_dir"),
    "distributed": ("timeout_minutes",),
}


@dataclass(frozen=True)
class ResumePlan:
    """Where a run starts: `load` (a checkpoint root or iter_* folder) resumes everything, None starts
    from scratch (or from checkpoint.pretrained_checkpoint's weights)."""

    load: str | None
    source: str  # "checkpoint.load" | "checkpoint.save" (a re-run) | "scratch" | "overwrite"
    iteration: int | None = None  # the checkpoint a re-run resumes (the tracker's, or the newest)
    train_iters: int = 0

    @property
    def finished(self) -> bool:
        """A re-run of a finished run: the checkpoint is at (or past) train.train_iters."""
        return self.iteration is not None and self.iteration >= self.train_iters

    def describe(self) -> str:
        if self.source == "checkpoint.load":
            return f"checkpoint: resume from checkpoint.load={self.load}"
        if self.source == "checkpoint.save":
            what = (
                f"the run is finished (iteration {self.iteration} >= train.train_iters={self.train_iters}): "
                "nothing to train"
                if self.finished
                else f"iteration {self.iteration}"
            )
            return f"checkpoint: resume from {self.load} (checkpoint.save holds this config's checkpoints; {what})"
        if self.source == "overwrite":
            return (
                "checkpoint: start from scratch; checkpoint.overwrite=true moves the saved iterations aside "
                "(once: a relaunch of this command resumes the new run)"
            )
        return "checkpoint: start from scratch"


def _differences(saved: Any, current: Any, prefix: str = "") -> list[str]:
    """Dotted fields whose values differ between two YAML trees (`field: saved -> current`)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for key in list(saved) + [k for k in current if k not in saved]:
            section = prefix.split(".")[0] if prefix else key
            free = RESUME_FREE_FIELDS.get(section, ())
            if free is None or (prefix == section and key in free):
                continue
            name = f"{prefix}.{key}" if prefix else key
            if key not in saved or key not in current:
                out.append(f"{name}: {'absent' if key not in saved else 'set'} in the checkpoint")
            else:
                out += _differences(saved[key], current[key], name)
        return out
    return [] if saved == current else [f"{prefix}: {saved!r} -> {current!r}"]


def _saved_differences(cfg: ConfigContainer, folder: str) -> list[str]:
    from bridge.config.yaml_io import load_yaml_text, to_container_dict

    path = os.path.join(folder, RUN_CONFIG_FILENAME)
    if not os.path.isfile(path):
        return [f"{folder} has no {RUN_CONFIG_FILENAME}, so which run wrote it is unknown"]
    try:
        with open(path) as f:
            saved = load_yaml_text(f.read(), path)
    except (OSError, ValueError) as err:
        return [f"{path} is unreadable ({err})"]
    return _differences(saved, to_container_dict(cfg))


def resume_plan(cfg: ConfigContainer) -> ResumePlan:
    """Where this run starts, decided once (the dry run prints it, pretrain follows it).

    checkpoint.load set: resume from it. Otherwise, when checkpoint.save already holds complete
    checkpoints: resume from them if the newest one's run_config.yaml is this config (up to
    RESUME_FREE_FIELDS), as Megatron-Bridge's recipes do by setting load = save; with
    checkpoint.overwrite start from scratch and retire them (bridge.checkpoint.overwrite), unless they are
    the checkpoints of the run the flag started (its marker, this config): then resume them; else a
    ConfigError before anything runs."""
    c = cfg.checkpoint
    iters = cfg.train.train_iters
    if c.load:
        return ResumePlan(load=c.load, source="checkpoint.load", train_iters=iters)
    held = complete_iterations(c.save) if c.save else []
    if not held:
        return ResumePlan(load=None, source="scratch", train_iters=iters)
    tracked = tracked_or_none(c.save)
    newest = tracked if tracked in held else held[-1]
    if c.overwrite and overwrite_marker(c.save) is None:
        return ResumePlan(load=None, source="overwrite", train_iters=iters)
    differs = _saved_differences(cfg, str(checkpoint_dir(c.save, newest)))
    if not differs:
        # with checkpoint.overwrite: these are the checkpoints of the run the flag started (its marker),
        # so a relaunch of that command resumes them instead of replacing them again
        return ResumePlan(load=c.save, source="checkpoint.save", iteration=newest, train_iters=iters)
    if c.overwrite:  # a run of another config with the flag: it replaces the one the marker started
        return ResumePlan(load=None, source="overwrite", train_iters=iters)
    shown = "; ".join(differs[:6]) + (f"; and {len(differs) - 6} more" if len(differs) > 6 else "")
    raise config_error(
        "checkpoint.save",
        c.save,
        f"holds checkpoints (iterations {', '.join(map(str, held))}) of another configuration ({shown}), "
        "and checkpoint.load is not set: this run would replace them",
        _refusal_fix(c.save, differs),
    )


def _refusal_fix(save: str, differs: list[str]) -> str:
    """Only fixes that get past this error and the next: a changed model cannot load the saved weights, so
    checkpoint.load is suggested only when the model section is the same."""
    own = f"`checkpoint.save={str(save).rstrip('/')}_2` (a folder of its own)"
    replace = "`checkpoint.overwrite=true` (replaces them)"
    if any(d.startswith("model.") or d.startswith("model:") for d in differs):
        return f"the model differs, so these weights do not load into it: {own}, or {replace}"
    return f"{own}, {replace}, or `checkpoint.load={save}` to resume them with this configuration"
