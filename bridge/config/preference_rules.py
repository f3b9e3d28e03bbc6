"""The rules of preference runs (dataset.kind=preference, the `dpo` section) and their plan: which loss,
which reference model. Called by bridge.config.validation and bridge.config.run_plan (one place each)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.config import sections as S
from bridge.config.checks.data import blend_paths
from bridge.errors import ConfigError, config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.parallel.layout import ParallelLayout

PREFERENCE_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
FIELDS = ("prompt", "chosen", "rejected")
HINT = (
    'each record is {"prompt": "<prompt>", "chosen": "<preferred answer>", "rejected": "<other answer>"}, or '
    'in chat form {"prompt": [messages], "chosen": [assistant messages], "rejected": [assistant messages]}'
)


@dataclass(frozen=True)
class DPOPlan:
    """What a preference run optimises (bridge.training.preference reads it)."""

    beta: float
    loss_type: str  # DPO_LOSS_TYPES
    label_smoothing: float
    # adapters_off: the policy itself with its PEFT adapters switched off (no second copy);
    # frozen_copy: a second, frozen model holding the weights training starts from
    reference: str


def check_preference(
    cfg: ConfigContainer, layout: ParallelLayout, pipeline_engine: str | None = None
) -> None:
    """Every rule of a preference run, before launch (nothing when dataset.kind is not preference)."""
    d, p = cfg.dataset, cfg.dpo
    if d.kind != "preference":
        return
    if p.loss_type not in S.DPO_LOSS_TYPES:
        raise config_error(
            "dpo.loss_type", p.loss_type, f"must be one of {', '.join(S.DPO_LOSS_TYPES)}", "pick one"
        )
    if (
        isinstance(p.beta, bool)
        or not isinstance(p.beta, (int, float))
        or not (p.beta > 0 and math.isfinite(p.beta))
    ):
        raise config_error("dpo.beta", p.beta, "must be a finite number > 0", "e.g. dpo.beta=0.1")
    if not 0.0 <= p.label_smoothing < 0.5:
        raise config_error(
            "dpo.label_smoothing", p.label_smoothing, "must be in [0, 0.5) (a flip probability)", "e.g. 0.0"
        )
    if p.label_smoothing and p.loss_type != "sigmoid":
        raise config_error(
            "dpo.label_smoothing",
            p.label_smoothing,
            f"smooths the sigmoid loss only, and dpo.loss_type={p.loss_type}",
            "set dpo.label_smoothing=0.0, or dpo.loss_type=sigmoid",
        )
    if p.reference not in S.DPO_REFERENCES:
        raise config_error(
            "dpo.reference",
            p.reference,
            f"must be one of {', '.join(S.DPO_REFERENCES)}",
            "e.g. dpo.reference=auto",
        )
    if p.reference == "adapters_off" and cfg.peft.scheme is None:
        raise config_error(
            "dpo.reference",
            p.reference,
            "the reference is the base model with the adapters switched off, and peft.scheme is null (no adapters)",
            "set peft.scheme=lora, or dpo.reference=auto",
        )
    for path in d.data_paths:
        if not str(path).endswith(PREFERENCE_FILE_SUFFIXES):
            raise config_error(
                "dataset.data_paths",
                path,
                f"dataset.kind=preference reads {', '.join(PREFERENCE_FILE_SUFFIXES)} files of "
                '{"prompt", "chosen", "rejected"} records',
                "give JSON Lines, JSON or Parquet files",
            )
    if d.packed_sequence_size:
        raise config_error(
            "dataset.packed_sequence_size",
            d.packed_sequence_size,
            "a preference sample is a (chosen, rejected) pair of rows, which packing would split",
            "set dataset.packed_sequence_size=0",
        )
    if layout.cp > 1:
        raise config_error(
            "model.context_parallel_size",
            layout.cp,
            "DPO sums each sequence's log-probabilities over the whole row, which context parallelism splits "
            "over ranks (not supported yet)",
            "set model.context_parallel_size=1",
        )
    if cfg.distributed.strategy not in ("megatron", "ddp"):
        raise config_error(
            "distributed.strategy",
            cfg.distributed.strategy,
            "DPO's reference pass runs on Megatron-Core's schedules with plain or DDP-wrapped chunks",
            "use distributed.strategy=megatron",
        )
    if pipeline_engine == "torch":
        raise config_error(
            "distributed.pp_schedule",
            cfg.distributed.pp_schedule,
            "DPO's reference pass runs on Megatron-Core's pipeline schedules, not torch.distributed.pipelining's",
            "use distributed.pp_schedule=1f1b (or interleaved_1f1b)",
        )
    if reference_kind(cfg) == "frozen_copy" and cfg.checkpoint.load:
        raise config_error(
            "checkpoint.load",
            cfg.checkpoint.load,
            "full-parameter DPO keeps its reference as a copy of the starting weights, which a resumed run no "
            "longer holds (resuming it is not supported yet)",
            "remove it (~checkpoint.load) to start from checkpoint.pretrained_checkpoint, or train LoRA "
            "(peft.scheme=lora), whose reference is the base with the adapters off",
        )


def reference_kind(cfg: ConfigContainer) -> str:
    ref = cfg.dpo.reference
    if ref == "auto":
        return "adapters_off" if cfg.peft.scheme is not None else "frozen_copy"
    return ref


def dpo_plan(cfg: ConfigContainer) -> DPOPlan | None:
    if cfg.dataset.kind != "preference":
        return None
    p = cfg.dpo
    return DPOPlan(
        beta=float(p.beta),
        loss_type=p.loss_type,
        label_smoothing=float(p.label_smoothing),
        reference=reference_kind(cfg),
    )


def _messages(value, key: str) -> list[dict] | str:
    """A list of {"role", "content"} messages (Arrow's null keys dropped), or what is wrong."""
    out = []
    for j, m in enumerate(value, 1):
        if not isinstance(m, dict):
            return f"{key!r} message {j} is {type(m).__name__}, not an object; {HINT}"
        m = {k: v for k, v in m.items() if v is not None}
        if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            return f"{key!r} message {j} needs string 'role' and 'content'; {HINT}"
        out.append(m)
    if not out:
        return f"{key!r} is an empty list; {HINT}"
    if key != "prompt" and any(m["role"] != "assistant" for m in out):
        return f"{key!r} holds a message whose role is not 'assistant'; {HINT}"
    return out


def parse_preference(obj) -> tuple | str:
    """The record's (prompt, chosen, rejected): three strings, or three message lists (chat form); or what
    is wrong with it (a sentence)."""
    if not isinstance(obj, dict):
        return f"is {type(obj).__name__} {obj!r:.40}, not a JSON object; {HINT}"
    out = []
    for key in FIELDS:
        value = obj.get(key)
        if value is None:
            return f"has no {key!r} (keys: {sorted(obj)}); {HINT}"
        if isinstance(value, list):
            value = _messages(value, key)
            if isinstance(value, str):
                return value
        elif not isinstance(value, str):
            return f"{key!r} is {type(value).__name__} {value!r:.40}, not a string or a message list; {HINT}"
        out.append(value)
    if len({isinstance(v, list) for v in out}) > 1:
        return (
            f"mixes text and message lists; give all three as strings or all three as message lists; {HINT}"
        )
    return out[0], out[1], out[2]


def check_preference_files(cfg: ConfigContainer) -> None:
    """Before launch, every record of the JSON Lines / JSON preference files (Parquet files are checked
    when the run reads them): the first bad one is one error naming the file and line."""
    if cfg.dataset.kind != "preference":
        return

    paths, _ = blend_paths(cfg.dataset.data_paths) if cfg.dataset.data_paths else ([], None)
    for path in paths:
        if not path.endswith((".jsonl", ".json")) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.lstrip().startswith("["):
            try:
                rows = list(enumerate(json.loads(text), 1))
            except json.JSONDecodeError as err:
                raise _bad_record(f"{path}:{err.lineno}", f"is malformed JSON ({err.msg})") from None
            where = "row"
        else:
            rows, where = [], "line"
            for lineno, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append((lineno, json.loads(line)))
                except json.JSONDecodeError as err:
                    raise _bad_record(f"{path}:{lineno}", f"is malformed JSON ({err.msg})") from None
        if not rows:
            raise config_error(
                "dataset.data_paths", path, "holds no records", "give preference records in it"
            )
        for n, obj in rows:
            problem = parse_preference(obj)
            if isinstance(problem, str):
                raise _bad_record(f"{path}: {where} {n}" if where == "row" else f"{path}:{n}", problem)


def _bad_record(where: str, what: str):
    return ConfigError(f"dataset.data_paths: {where} {what}; fix the record or remove it from the file")
