"""lm-eval benchmarks during training (the plan's `benchmarks`, bridge/config/benchmarks.py).

Every `interval` iterations, on the training ranks at the training layout: each data-parallel replica's
driver rank (bridge/inference/engine.py) runs lm-eval's `simple_evaluate` with the `bridge` backend over the
replica's chunks, and the replica's other ranks compute with it. Every replica runs the same requests in
the same order, so collectives that span replicas (expert parallelism's all-to-all, a DDP wrapper's hooks
are not involved in forward-only steps) line up. Global rank 0's scores are broadcast to every rank, so
the logging rank writes them beside the validation loss (TensorBoard / W&B through MetricWriters).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

logger = logging.getLogger(__name__)


@functools.cache
def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


@functools.cache
def _task_manager(names: tuple[str, ...], include_path: str | None):
    from bridge.inference.lm_eval_backend import task_manager

    return task_manager(list(names), include_path)


def _scores(results: dict) -> dict[str, float]:
    """{"task/metric": value} of lm-eval's results (the metrics, not their stderr)."""
    out = {}
    for task, metrics in results["results"].items():
        for key, value in metrics.items():
            if isinstance(value, float) and "stderr" not in key:  # metrics (not sample_len, an int)
                out[f"{task}/{key.split(',')[0]}"] = float(value)
    return out


def run_benchmarks(model_chunks: list, plan: Any) -> dict[str, float]:
    """The plan's tasks on this replica; every rank returns global rank 0's scores."""
    import lm_eval
    import torch.distributed as dist

    from bridge.inference.engine import Engine
    from bridge.inference.lm_eval_backend import BridgeLM

    bench = plan.benchmarks
    engine = Engine(model_chunks, plan.provider.vocab_size)
    scores: dict[str, float] = {}
    if engine.is_driver:
        try:
            lm = BridgeLM(engine, _tokenizer(bench.tokenizer_path), batch_size=bench.batch_size)
            manager = _task_manager(bench.tasks, bench.include_path)
            for task, limit in zip(bench.tasks, bench.limits, strict=True):
                results = lm_eval.simple_evaluate(
                    model=lm,
                    tasks=[task],
                    task_manager=manager,
                    limit=limit,
                    bootstrap_iters=0,
                    verbosity="WARNING",
                )
                scores.update(_scores(results))
        finally:
            engine.stop()
    else:
        engine.serve_forever()
    shared = [scores]
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(shared, src=0)
    return shared[0]


def format_benchmark_line(iteration: int, scores: dict[str, float]) -> str:
    body = " | ".join(f"{k}: {v:.6g}" for k, v in scores.items())
    return f" lm-eval at iteration {iteration} | {body} |"
