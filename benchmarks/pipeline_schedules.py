"""Pipeline schedules on 4 CPU ranks (gloo): time per step and peak memory, Megatron-Core's 1f1b and
interleaved 1f1b against torch.distributed.pipelining's gpipe, looped_bfs, dfs and zero_bubble.

Same model (8 layers, hidden 256, ffn 688, 8 heads / 4 KV groups, vocab 8192, untied), same batch (global 16
x 256 mock tokens, micro batch 1), fp32, Adam, strategy megatron, in one run. Layouts: PP=4 (DP=1, 16 micro
batches per step) for every schedule, virtual stages (VPP=2, one layer per stage) for the multi-stage ones,
and PP=2 x VPP=2 (DP=2, 8 micro batches) for the multi-stage ones. Each row is a fresh torchrun launch of
this file (so its peak RSS is its own) training `--iters` steps with pretrain(); step 1 is warm-up and the
last step measures memory, so neither is timed.

Columns: time per step (median of the timed steps, the slowest rank's wall time); peak activations (the
largest, over ranks, of the bytes autograd holds saved for backward at once, parameters excluded: measured
with torch.autograd.graph.saved_tensors_hooks during the last step); peak RSS (the largest process
high-water mark over ranks, imports and the model included); the bubble fraction of the schedule's formula
(bridge.parallel.schedules, equal stage times) for comparison. The 1f1b row (and, per layout, the
interleaved_1f1b row) is the baseline the ratios use.

    OMP_NUM_THREADS=1 python benchmarks/pipeline_schedules.py [--iters 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import weakref
from pathlib import Path

from bridge.config.run_plan import build_plan

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LAYERS, HIDDEN, FFN, HEADS, GROUPS, VOCAB, SEQ, BATCH = 8, 256, 688, 8, 4, 8192, 256, 16
ROWS = [  # (schedule, pp, vpp, baseline row)
    ("1f1b", 4, None, None),
    ("gpipe", 4, None, "1f1b pp4"),
    ("interleaved_1f1b", 4, 2, "1f1b pp4"),
    ("looped_bfs", 4, 2, "interleaved_1f1b pp4 vpp2"),
    ("dfs", 4, 2, "interleaved_1f1b pp4 vpp2"),
    ("zero_bubble", 4, 2, "interleaved_1f1b pp4 vpp2"),
    ("interleaved_1f1b", 2, 2, None),
    ("looped_bfs", 2, 2, "interleaved_1f1b pp2 vpp2"),
    ("dfs", 2, 2, "interleaved_1f1b pp2 vpp2"),
    ("zero_bubble", 2, 2, "interleaved_1f1b pp2 vpp2"),
]


def row_name(schedule: str, pp: int, vpp: int | None) -> str:
    return f"{schedule} pp{pp}" + (f" vpp{vpp}" if vpp else "")


class SavedActivations:
    """Bytes of the tensors autograd holds for backward (each storage once, parameters excluded)."""

    def __init__(self, parameters):
        self.params = {p.untyped_storage().data_ptr() for p in parameters}
        self.live: dict[int, list] = {}  # storage pointer -> [bytes, references]
        self.now = self.peak = 0

    def pack(self, tensor):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr in self.params or tensor.device.type == "meta":
            return tensor
        entry = self.live.setdefault(ptr, [tensor.untyped_storage().nbytes(), 0])
        if entry[1] == 0:
            self.now += entry[0]
            self.peak = max(self.peak, self.now)
        entry[1] += 1
        return _Held(tensor, self, ptr)

    def release(self, ptr: int) -> None:
        entry = self.live[ptr]
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.live[ptr]

    @staticmethod
    def unpack(held):
        return held.tensor if isinstance(held, _Held) else held


class _Held:
    def __init__(self, tensor, meter: SavedActivations, ptr: int):
        self.tensor = tensor
        weakref.finalize(self, meter.release, ptr)


def worker(schedule: str, pp: int, vpp: int | None, iters: int) -> None:
    import torch

    import bridge.training.train as train_module
    from bridge.config.overrides import apply_overrides
    from bridge.training import pretrain
    from recipes.llama import llama32_1b_pretrain_config

    overrides = [
        f"model.num_layers={LAYERS}", f"model.hidden_size={HIDDEN}", f"model.ffn_hidden_size={FFN}",
        f"model.num_attention_heads={HEADS}", f"model.num_query_groups={GROUPS}", f"model.vocab_size={VOCAB}",
        f"model.seq_length={SEQ}", "model.share_embeddings_and_output_weights=False",
        "mixed_precision.precision=fp32", f"train.train_iters={iters}", f"train.global_batch_size={BATCH}",
        "train.micro_batch_size=1", "scheduler.lr_warmup_iters=0", "validation.eval_interval=0",
        "validation.eval_iters=0", "checkpoint.save=null", "checkpoint.save_interval=0",
        "logger.tensorboard_dir=null", f"logger.log_interval={iters}", "dataset.num_workers=0",
        "dataset.kind=mock", f"model.pipeline_model_parallel_size={pp}", f"distributed.pp_schedule={schedule}",
        f"model.virtual_pipeline_model_parallel_size={vpp if vpp else 'null'}",
    ]  # fmt: skip
    cfg = apply_overrides(llama32_1b_pretrain_config(), overrides)
    step_times: list[float] = []
    meter: list[SavedActivations] = []
    train_step = train_module.train_step

    def measured(ctx):
        calls = len(step_times) + 1
        if calls == iters:  # the last step: activation memory (the hooks cost time, so it is not timed)
            meter.append(SavedActivations(p for chunk in ctx.model for p in chunk.parameters()))
            with torch.autograd.graph.saved_tensors_hooks(meter[0].pack, meter[0].unpack):
                out = train_step(ctx)
            step_times.append(float("nan"))
            return out
        torch.distributed.barrier()
        start = time.perf_counter()
        out = train_step(ctx)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        torch.distributed.all_reduce(elapsed, op=torch.distributed.ReduceOp.MAX)  # the slowest rank
        step_times.append(float(elapsed))
        return out

    train_module.train_step = measured
    plan = build_plan(cfg, int(os.environ["WORLD_SIZE"]), cuda=torch.cuda.is_available())
    result = pretrain(plan)
    stats = torch.tensor(
        [meter[0].peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024], dtype=torch.float64
    )
    torch.distributed.all_reduce(stats, op=torch.distributed.ReduceOp.MAX)
    if torch.distributed.get_rank() == 0:
        timed = step_times[1:-1]
        print(
            "@@row "
            + json.dumps(
                {
                    "row": row_name(schedule, pp, vpp),
                    "step_s": statistics.median(timed),
                    "activations_gb": float(stats[0]) / 1e9,
                    "rss_gb": float(stats[1]) / 1e9,
                    "bubble": plan.pipeline.bubble_fraction,
                    "microbatches": plan.num_microbatches,
                    "dp": plan.layout.dp,
                    "engine": plan.pipeline.engine,
                    "loss": result.losses[iters],
                }
            ),
            flush=True,
        )


def launch(schedule: str, pp: int, vpp: int | None, iters: int) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", "--master_addr=127.0.0.1",
           f"--master_port={29400 + os.getpid() % 1000}", __file__, "--worker", schedule, str(pp),
           str(vpp or 0), "--iters", str(iters)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": str(REPO)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    rows = [json.loads(line[6:]) for line in out.stdout.splitlines() if line.startswith("@@row ")]
    if out.returncode or not rows:
        raise SystemExit(f"{row_name(schedule, pp, vpp)} failed:\n{(out.stdout + out.stderr)[-4000:]}")
    return rows[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=5, help="steps per row (>= 3: warm-up, timed, memory)")
    parser.add_argument("--worker", nargs=3, metavar=("SCHEDULE", "PP", "VPP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        schedule, pp, vpp = args.worker
        worker(schedule, int(pp), int(vpp) or None, args.iters)
        return
    if args.iters < 3:
        raise SystemExit("--iters must be at least 3 (warm-up, timed steps, memory step)")
    results = {}
    for schedule, pp, vpp, _ in ROWS:
        results[row_name(schedule, pp, vpp)] = launch(schedule, pp, vpp, args.iters)
        print(f"measured {row_name(schedule, pp, vpp)}", file=sys.stderr, flush=True)
    print(
        f"4 CPU ranks (gloo), {LAYERS} layers, hidden {HIDDEN}, global batch {BATCH} x {SEQ} tokens, fp32; "
        f"median of {args.iters - 2} timed steps\n"
    )
    print("| schedule | engine | layout | micro batches | s / step | vs baseline | peak activations (GB) "
          "| vs baseline | peak RSS (GB) | bubble (formula) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for schedule, pp, vpp, baseline in ROWS:
        r = results[row_name(schedule, pp, vpp)]
        base = results[baseline] if baseline else r
        layout = f"PP={pp}" + (f" x VPP={vpp}" if vpp else "") + f", DP={r['dp']}"
        engine = "Megatron-Core" if r["engine"] == "megatron" else "torch"
        print(
            f"| {schedule}{' (baseline)' if not baseline else ''} | {engine} | {layout} | {r['microbatches']} "
            f"| {r['step_s']:.3f} | {r['step_s'] / base['step_s']:.2f}x | {r['activations_gb']:.3f} "
            f"| {r['activations_gb'] / base['activations_gb']:.2f}x | {r['rss_gb']:.2f} | {100 * r['bubble']:.1f}% |"
        )


if __name__ == "__main__":
    main()
