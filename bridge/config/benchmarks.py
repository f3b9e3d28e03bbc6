"""The run's lm-eval benchmark decision (pure data): which tasks, how many documents, how often.

Built from `validation.lm_eval_*` by the run plan and read by bridge/training/benchmarks.py. The rules are
checked here, before launch: tasks are text, so the run needs a Hugging Face tokenizer; the benchmark runs
one model chunk per rank on Megatron-Core's schedule without context parallelism, so no VPP, no CP and the
`megatron` or `ddp` strategy. Pure data: no torch or lm_eval import (task names are checked by lm-eval when
the first benchmark starts, before any document runs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.parallel.layout import ParallelLayout

SUPPORTED_STRATEGIES = ("megatron", "ddp")


@dataclass(frozen=True)
class BenchmarkPlan:
    tasks: tuple[str, ...]
    limits: tuple[int | None, ...]  # documents per task (None: all)
    interval: int  # every this many iterations
    include_path: str | None
    batch_size: int
    tokenizer_path: str  # the run's Hugging Face tokenizer

    def describe(self) -> str:
        shown = ", ".join(
            t if n is None else f"{t} ({n} docs)" for t, n in zip(self.tasks, self.limits, strict=True)
        )
        return f"lm-eval benchmarks every {self.interval} iterations: {shown}"


def _parse(entry: object, default_limit: int | None) -> tuple[str, int | None]:
    text = str(entry).strip()
    name, sep, limit = text.partition(":")
    if not name or (sep and not limit.isdigit()) or (sep and int(limit) < 1):
        raise config_error(
            "validation.lm_eval_tasks",
            entry,
            "each entry is an lm-eval task name, or `name:limit` with a positive number of documents",
            "write e.g. validation.lm_eval_tasks=[hellaswag:200,arc_easy]",
        )
    return name, int(limit) if sep else default_limit


def benchmark_plan(cfg: ConfigContainer, layout: ParallelLayout) -> BenchmarkPlan | None:
    v = cfg.validation
    if not v.lm_eval_tasks:
        return None
    default_limit = v.lm_eval_limit
    if default_limit is not None and default_limit < 1:
        raise config_error(
            "validation.lm_eval_limit",
            default_limit,
            "must be >= 1 (or null: every document)",
            "set validation.lm_eval_limit=100 or ~validation.lm_eval_limit",
        )
    parsed = [_parse(t, default_limit) for t in v.lm_eval_tasks]
    interval = v.lm_eval_interval if v.lm_eval_interval is not None else v.eval_interval
    if not interval or interval < 1:
        raise config_error(
            "validation.lm_eval_interval",
            v.lm_eval_interval,
            "benchmarks need a positive interval (null follows validation.eval_interval, which is "
            f"{v.eval_interval!r})",
            "set validation.lm_eval_interval=100, or drop the tasks with validation.lm_eval_tasks=[]",
        )
    if v.lm_eval_batch_size < 1:
        raise config_error(
            "validation.lm_eval_batch_size",
            v.lm_eval_batch_size,
            "must be >= 1",
            "set validation.lm_eval_batch_size=8",
        )
    if v.lm_eval_include_path is not None and not os.path.isdir(v.lm_eval_include_path):
        raise config_error(
            "validation.lm_eval_include_path",
            v.lm_eval_include_path,
            "is not a folder",
            "point it at the folder of task YAML files",
        )
    tok = cfg.tokenizer
    if tok.tokenizer_type != "HuggingFaceTokenizer" or not tok.tokenizer_model:
        raise config_error(
            "validation.lm_eval_tasks",
            list(v.lm_eval_tasks),
            f"lm-eval tasks are text and need the run's Hugging Face tokenizer (tokenizer.tokenizer_type is "
            f"{tok.tokenizer_type!r})",
            "set tokenizer.tokenizer_type=HuggingFaceTokenizer tokenizer.tokenizer_model=HF_DIR, or "
            "validation.lm_eval_tasks=[]",
        )
    for field, value, rule in (
        ("model.context_parallel_size", layout.cp, layout.cp > 1),
        ("model.virtual_pipeline_model_parallel_size", layout.vpp, bool(layout.vpp and layout.vpp > 1)),
    ):
        if rule:
            raise config_error(
                field,
                value,
                "lm-eval benchmarks during training run without context parallelism and virtual pipeline stages",
                "drop validation.lm_eval_tasks for this layout (validation.lm_eval_tasks=[]) and evaluate a "
                "checkpoint with `bridge eval` instead",
            )
    strategy = cfg.distributed.strategy
    if strategy not in SUPPORTED_STRATEGIES:
        raise config_error(
            "distributed.strategy",
            strategy,
            f"lm-eval benchmarks during training run with the {' or '.join(SUPPORTED_STRATEGIES)} strategy",
            "evaluate this run's checkpoints with `bridge eval`, and set validation.lm_eval_tasks=[]",
        )
    return BenchmarkPlan(
        tasks=tuple(n for n, _ in parsed),
        limits=tuple(limit for _, limit in parsed),
        interval=int(interval),
        include_path=v.lm_eval_include_path,
        batch_size=int(v.lm_eval_batch_size),
        tokenizer_path=str(tok.tokenizer_model),
    )
