"""How long a checkpoint save stops the training loop: synchronous vs asynchronous (checkpoint.async_save).

The same run twice, in the same invocation, each in a fresh process on one rank: a Llama-shaped model
(4 layers, hidden 256, vocab 32000, fp32; with Adam's state about 0.3 GB a checkpoint) trained for
`--iters` steps, saving every `--interval`. The stall of a save is the time the loop spent inside it
(TrainResult.save_stalls): the whole write for a synchronous save; building the state dict and forking
the writer for an async one (plus waiting for the previous write, if it is still in flight). The
table gives each save's stall, the median step time around it, and the run's wall time.

    OMP_NUM_THREADS=2 python benchmarks/save_stall.py [--iters 9] [--interval 2] [--hidden 256]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import TIMED_RUN_OVERRIDES, emit_result, run_worker  # noqa: E402


def shape(hidden: int) -> list[str]:
    return [
        "model.num_layers=4", f"model.hidden_size={hidden}", f"model.ffn_hidden_size={hidden * 11 // 4}",
        "model.num_attention_heads=8", "model.num_query_groups=4", "model.vocab_size=32000",
        "model.seq_length=256", "model.share_embeddings_and_output_weights=False",
        "mixed_precision.precision=fp32",
    ]  # fmt: skip


def worker(mode: str, iters: int, interval: int, hidden: int) -> None:
    from bridge.config.overrides import apply_overrides
    from bridge.training import pretrain
    from recipes.llama import llama32_1b_pretrain_config

    with tempfile.TemporaryDirectory(prefix="save_stall_") as save_dir:
        cfg = apply_overrides(llama32_1b_pretrain_config(), [
            *shape(hidden), *TIMED_RUN_OVERRIDES, f"train.train_iters={iters}", "train.global_batch_size=4",
            "train.micro_batch_size=4", "dataset.num_workers=0", f"checkpoint.save={save_dir}",
            f"checkpoint.save_interval={interval}", f"checkpoint.async_save={mode == 'async'}",
            "checkpoint.most_recent_k=2",
        ])  # fmt: skip
        start = time.perf_counter()
        result = pretrain(cfg)
        wall = time.perf_counter() - start
        size = max(
            (
                sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                for p in Path(save_dir).glob("iter_*")
            ),
            default=0,
        )
    emit_result({
        "stalls": {str(k): v for k, v in result.save_stalls.items()},
        "steps": {str(k): v for k, v in result.iteration_times.items()},
        "wall": wall, "bytes": size,
    })  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--interval", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--worker", choices=["sync", "async"])
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.iters, args.interval, args.hidden)
        return
    runs = {}
    for mode in ("sync", "async"):
        cmd = [sys.executable, __file__, "--worker", mode, "--iters", str(args.iters),
               "--interval", str(args.interval), "--hidden", str(args.hidden)]  # fmt: skip
        runs[mode] = run_worker(cmd)
    steps = statistics.median(v for r in runs.values() for k, v in r["steps"].items() if k != "1")
    print(f"checkpoint: {runs['sync']['bytes'] / 1e6:.1f} MB; median train step {steps * 1000:.0f} ms")
    print(f"{'save at':>8} | {'sync stall (s)':>14} | {'async stall (s)':>15}")
    print(f"{'-' * 8}-+-{'-' * 14}-+-{'-' * 15}")
    for it in sorted(runs["sync"]["stalls"], key=int):
        sync, asyn = runs["sync"]["stalls"][it], runs["async"]["stalls"].get(it)
        print(f"{it:>8} | {sync:>14.3f} | {asyn if asyn is not None else float('nan'):>15.3f}")
    print(f"{'run wall':>8} | {runs['sync']['wall']:>14.1f} | {runs['async']['wall']:>15.1f}")


if __name__ == "__main__":
    main()
