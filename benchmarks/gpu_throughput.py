"""GPU training throughput on one GPU: bridge's pretrain() vs a Hugging Face transformers loop, with MFU.

Model: the `llama32_1b_pretrain_config` recipe's Llama-3.2-1B (16 layers, hidden 2048, ffn 8192, 32 heads /
8 KV groups, head size 64, vocab 128256, tied embeddings) at --seq-length tokens (4096), the same micro
and global batch on both sides (gradient accumulation over global / micro batches; one GPU, so DP=1),
the same mock token stream (bridge's MockDataset and loader, the recipe's loader workers).

- bridge: the recipe as it is, on this machine: what its RunPlan runs on CUDA (bf16 mixed precision,
  Transformer Engine's layer spec when TE imports, Megatron-Core DDP and the distributed optimizer, and
  the GPU performance settings the plan turns on - the table's notes list its report). Only the run's length, batch,
  sequence length and the timed-run overrides (no evaluation, checkpoints or TensorBoard, no LR warm-up:
  benchmarks/common.py) are set. In-process pretrain() in a fresh python process (a single process
  initializes its own one-rank group), as benchmarks/train_throughput.py runs it.
- Hugging Face: transformers' LlamaForCausalLM of the same config (AutoBridge.from_provider), attention
  "sdpa", use_cache=False, bf16 autocast over fp32 weights (what HF Trainer's bf16=True does; AdamW state
  and master weights fp32), torch.optim.AdamW(fused=True) with the recipe's lr / betas / eps / weight decay
  (Megatron's groups: no decay on norms), grad-norm clipping at the recipe's 1.0 (foreach), the loss
  read back once per step (bridge reads its loss and grad norm back every step too). Its own fresh process.

Per side: --warmup steps are run and dropped, then the median of --steps timed steps (each step's wall
time, host-synchronised). tokens/s/GPU = global batch x seq / median step; TFLOP/s/GPU from
bridge.parallel.planner.speed.model_flops_per_token (the same model FLOPs per token for both sides: matrix multiplies, fwd + bwd);
MFU against bridge.training.peak_flops' dense bf16 peak for the device. Peak memory: the CUDA
allocator's max allocated in each process.

    python benchmarks/gpu_throughput.py                 # one GPU, the defaults below
    python benchmarks/gpu_throughput.py --cpu-smoke     # the same code paths, tiny shape, CPU, fp32

--cpu-smoke shrinks the model (2 layers, hidden 128, 4 heads / 2 groups, vocab 1024), the sequence (128)
and the run (micro batch 2, global batch 4, 1 warm-up + 2 timed steps); without CUDA the recipe's plan
runs fp32 and the HF loop drops autocast. Its numbers check the code, not the GPU targets.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402
    TIMED_RUN_OVERRIDES,
    adamw,
    emit_result,
    hf_llama_config,
    hf_train_step,
    peak_memory,
    run_worker,
)

RECIPE = "llama32_1b_pretrain_config"
# The targets, for bf16 on an H200.
TARGET_RATIO, TARGET_MFU = 1.5, 0.45
SMOKE_SHAPE = [
    "model.hidden_size=128", "model.ffn_hidden_size=256", "model.num_attention_heads=4",
    "model.num_query_groups=2", "model.kv_channels=32", "model.vocab_size=1024",
]  # fmt: skip
DEFAULTS = dict(seq_length=4096, micro_batch_size=2, global_batch_size=8, steps=8, warmup=3, layers=None)
SMOKE_DEFAULTS = dict(seq_length=128, micro_batch_size=2, global_batch_size=4, steps=2, warmup=1, layers=2)
SIDES = ("hf", "bridge")
NAMES = {"bridge": "bridge pretrain() (Megatron-Core)", "hf": "HF LlamaForCausalLM + AdamW loop"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seq-length", type=int, help="tokens per sequence (4096; smoke 128)")
    parser.add_argument("--micro-batch-size", type=int, help="sequences per micro batch (2)")
    parser.add_argument("--global-batch-size", type=int, help="sequences per step (8; smoke 4)")
    parser.add_argument("--steps", type=int, help="timed steps per side, after the warm-up (8; smoke 2)")
    parser.add_argument("--warmup", type=int, help="steps run first and not timed (3; smoke 1)")
    parser.add_argument("--layers", type=int, help="shrink the model to this many layers (16)")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shape on CPU in fp32: checks the code")
    parser.add_argument("--only", choices=SIDES, help="run one side only (no ratio)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name, value in (SMOKE_DEFAULTS if args.cpu_smoke else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("seq_length", "micro_batch_size", "global_batch_size", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0 or (args.layers is not None and args.layers < 1):
        parser.error("--warmup must be >= 0 and --layers >= 1")
    if args.global_batch_size % args.micro_batch_size:
        parser.error("--global-batch-size must be a multiple of --micro-batch-size (one GPU: DP=1)")
    return args


def run_config(args: argparse.Namespace):
    """The recipe with this run's length, batch and shape: the one config both sides read."""
    from bridge.config.compose import compose
    from recipes import get_recipe

    overrides = [
        *TIMED_RUN_OVERRIDES,
        f"model.seq_length={args.seq_length}",
        f"train.train_iters={args.warmup + args.steps}",
        f"train.global_batch_size={args.global_batch_size}",
        f"train.micro_batch_size={args.micro_batch_size}",
    ]
    if args.cpu_smoke:
        overrides += SMOKE_SHAPE
    if args.layers is not None:
        overrides.append(f"model.num_layers={args.layers}")
    cfg, _ = compose(get_recipe(RECIPE)(), overrides=overrides)
    return cfg


# ---- workers (each in a fresh process) -----------------------------------------------------------------


def device_name() -> str:
    import torch

    return (
        torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else f"CPU ({platform.processor() or platform.machine()})"
    )


def bridge_worker(args: argparse.Namespace) -> dict:
    from bridge.config import performance
    from bridge.models.specs import uses_te_spec
    from bridge.training.pretrain import pretrain
    from bridge.training.process_plan import plan_for_this_process

    plan = plan_for_this_process(run_config(args))
    result = pretrain(plan)
    times = [result.iteration_times[it] for it in sorted(result.iteration_times) if it > args.warmup]
    p, cfg = plan.provider, plan.config
    settings = {
        "precision": f"{plan.precision.name} (requested {plan.precision.requested})",
        "compute": plan.precision.compute,
        "layer spec": "Transformer Engine" if uses_te_spec(p.layer_variant()) else "Megatron-Core local",
        "attention_backend": str(p.attention_backend),
        "strategy": cfg.distributed.strategy,
        "distributed optimizer": cfg.optimizer.use_distributed_optimizer,
        "overlap grad reduce / param gather": f"{cfg.distributed.overlap_grad_reduce} / {cfg.distributed.overlap_param_gather}",
        # the plan's own report of the recipe's GPU performance settings (active, or inactive and why)
        "performance settings": "; ".join(
            line.removeprefix("performance: ") for line in performance.summary(plan.performance)
        )
        or "none asked for",
        "layout": plan.layout.describe(),
    }
    return {"step_s": times, "final_loss": result.losses[max(result.losses)], "settings": settings}


def hf_worker(args: argparse.Namespace) -> dict:
    import math

    import torch
    from transformers import LlamaForCausalLM

    from bridge.training.data.loaders import build_iterator
    from bridge.training.data.mock import MockDataset

    cfg = run_config(args)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(1234)
    with device:
        model = LlamaForCausalLM(hf_llama_config(cfg.model, attn_implementation="sdpa"))
    model = model.to(torch.float32).train()  # fp32 weights: autocast runs the matmuls in bf16
    o = cfg.optimizer
    opt = adamw(model, o.lr, (o.adam_beta1, o.adam_beta2), o.adam_eps, o.weight_decay, fused=True)
    micro_per_step = args.global_batch_size // args.micro_batch_size
    iters = args.warmup + args.steps
    dataset = MockDataset(
        iters * args.global_batch_size, args.seq_length, cfg.model.vocab_size - 1, seed=1234
    )
    workers = cfg.dataset.num_workers if cuda else 0  # the recipe's loader workers; the plan's 0 on CPU
    data = build_iterator(dataset, 0, args.micro_batch_size, 0, 1, num_workers=workers)
    autocast = torch.bfloat16 if cuda else None
    times, loss = [], math.nan
    for step in range(iters):
        start = time.perf_counter()
        batch_loss = hf_train_step(
            model, opt, [next(data) for _ in range(micro_per_step)], o.clip_grad, device, autocast
        )
        loss = batch_loss.item()  # the step's one host sync
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
        if not math.isfinite(loss):
            raise SystemExit(f"HF loop: loss is {loss} at step {step + 1}")
    import transformers

    settings = {
        "model": f"transformers {transformers.__version__} LlamaForCausalLM, attn_implementation="
        f"{model.config._attn_implementation}, use_cache=False",
        "precision": "bf16 autocast over fp32 weights (fp32 master weights and AdamW state)"
        if cuda
        else "fp32 (no autocast on CPU)",
        "compute": "bf16" if cuda else "fp32",
        "optimizer": f"torch.optim.AdamW(fused=True), lr {o.lr:g}, betas ({o.adam_beta1}, {o.adam_beta2}), "
        f"eps {o.adam_eps:g}, weight decay {o.weight_decay:g} (not on norms), clip {o.clip_grad:g}",
        "loader workers": workers,
    }
    return {"step_s": times, "final_loss": loss, "settings": settings}


def worker_main(args: argparse.Namespace) -> None:
    result = (bridge_worker if args.worker == "bridge" else hf_worker)(args)
    peak, what = peak_memory()
    import torch

    cuda = torch.cuda.is_available()
    result.update(side=args.worker, peak_bytes=peak, peak_kind=what, device=device_name(), cuda=cuda)
    emit_result(result)


# ---- the parent: runs the workers, prints the table ------------------------------------------------------


def version(*names: str) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def summarise(side: dict, tokens_per_step: int, flops_per_token: float) -> dict:
    from bridge.training.peak_flops import mfu

    median = statistics.median(side["step_s"])
    tokens = tokens_per_step / median
    tflops = flops_per_token * tokens / 1e12
    ratio = None if not side["cuda"] else mfu(tflops, side["device"], side["settings"]["compute"])
    return {
        "median_step_s": median,
        "min_step_s": min(side["step_s"]),
        "max_step_s": max(side["step_s"]),
        "tokens_per_s": tokens,
        "tflops": tflops,
        "mfu": ratio,
        "peak_gib": side["peak_bytes"] / 2**30,
    }


def number(x: float) -> str:
    """One decimal from 1 up, three significant digits below (tiny CPU-smoke values stay readable)."""
    return f"{x:.1f}" if abs(x) >= 1 else f"{x:.3g}"


def mfu_text(row: dict, side: dict) -> str:
    if not side["cuda"]:
        return "n/a on CPU"
    return "n/a (device not in peak table)" if row["mfu"] is None else f"{row['mfu'] * 100:.1f}%"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    forwarded = list(sys.argv[1:] if argv is None else argv)
    python = os.path.relpath(sys.executable)  # the interpreter that ran it (a venv inside the checkout)
    python = sys.executable if python.startswith("..") else python
    command = shlex.join([python, os.path.relpath(__file__), *forwarded])
    from bridge.parallel.planner.speed import model_flops_per_token

    cfg = run_config(args)
    flops_per_token = model_flops_per_token(cfg.model.model_shape(), args.seq_length)
    tokens_per_step = args.global_batch_size * args.seq_length
    # --cpu-smoke runs on CPU even where a GPU is present: the workers see no CUDA device
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""} if args.cpu_smoke else None
    sides = [args.only] if args.only else list(SIDES)
    raw, failures = {}, {}
    for side in sides:
        print(f"=== {NAMES[side]}: fresh process ===", flush=True)
        try:
            raw[side] = run_worker(
                [sys.executable, __file__, *forwarded, "--worker", side], echo=True, env=env
            )
        except SystemExit as err:
            failures[side] = str(err)
            print(f"{side} worker failed: {err}", flush=True)
    rows = {side: summarise(r, tokens_per_step, flops_per_token) for side, r in raw.items()}

    any_side = next(iter(raw.values()), None)
    cuda = bool(any_side and any_side["cuda"])
    device = any_side["device"] if any_side else "unknown (no worker finished)"
    p = cfg.model
    print()
    print(
        f"## GPU training throughput: bridge vs Hugging Face ({'CPU smoke run' if args.cpu_smoke else 'one GPU'})"
    )
    print()
    print(f"- device: {device}")
    print(
        f"- versions: python {platform.python_version()}, torch {version('torch')}, megatron-core "
        f"{version('megatron-core', 'megatron_core')}, transformer-engine "
        f"{version('transformer-engine', 'transformer_engine', 'transformer-engine-torch')}, "
        f"transformers {version('transformers')}"
    )
    print(f"- command: `{command}`")
    print(
        f"- model: {RECIPE} ({p.num_layers} layers, hidden {p.hidden_size}, ffn {p.ffn_hidden_size}, "
        f"{p.num_attention_heads} heads / {p.num_query_groups} groups, vocab {p.vocab_size}), seq {args.seq_length}, "
        f"micro batch {args.micro_batch_size}, global batch {args.global_batch_size} "
        f"({args.global_batch_size // args.micro_batch_size} micro batches per step), "
        f"{number(flops_per_token / 1e9)} GFLOP per token (fwd + bwd)"
    )
    print(f"- steps per side: {args.warmup} warm-up (dropped) + {args.steps} timed; the median timed step")
    for side, r in raw.items():
        print(f"- {side}: " + "; ".join(f"{k}: {v}" for k, v in r["settings"].items()))
        row = rows[side]
        print(
            f"  timed steps {row['min_step_s']:.3f}-{row['max_step_s']:.3f} s (min-max), "
            f"final loss {r['final_loss']:.4f}"
        )
    print()
    memory = "peak memory GiB" if cuda else "peak memory GiB (max RSS)"
    unit = "GPU" if cuda else "process"
    head = ["loop", "median step s", f"tokens/s/{unit}", f"TFLOP/s/{unit}", "MFU", memory, "vs HF"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    hf = rows.get("hf")
    for side in ("bridge", "hf"):
        if side in failures:
            print(f"| {NAMES[side]} | failed | | | | | |")
            continue
        if side not in rows:
            continue
        row = rows[side]
        vs = f"{row['tokens_per_s'] / hf['tokens_per_s']:.2f}x" if hf else "n/a"
        print(
            f"| {NAMES[side]} | {row['median_step_s']:.3f} | {row['tokens_per_s']:,.0f} | {number(row['tflops'])} | "
            f"{mfu_text(row, raw[side])} | {row['peak_gib']:.2f} | {vs} |"
        )
    print()
    verdicts = targets(rows, raw, cuda, args.cpu_smoke)
    for line in verdicts:
        print(f"- {line}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "command": command,
                    "device": device,
                    "args": vars(args),
                    "flops_per_token": flops_per_token,
                    "workers": raw,
                    "rows": rows,
                    "failures": failures,
                    "targets": verdicts,
                },
                indent=2,
            )  # fmt: skip
            + "\n"
        )
    return 1 if failures else 0


def targets(rows: dict, raw: dict, cuda: bool, smoke: bool) -> list[str]:
    """One line per target: its value and whether it is met (bf16 on an H200 is what they are for)."""
    from bridge.training.peak_flops import device_peak

    lines = []
    bridge, hf = rows.get("bridge"), rows.get("hf")
    if not cuda or smoke:
        lines.append(
            f"targets (bf16, H200): bridge >= {TARGET_RATIO}x HF tokens/s, bridge MFU >= {TARGET_MFU:.0%}: "
            "not evaluated on a CPU smoke run (its numbers check the code paths, not the GPU)"
        )
        return lines
    peak = device_peak(raw["bridge"]["device"]) if "bridge" in raw else None
    if peak is None or not peak.label.startswith("H200"):
        lines.append(
            f"note: the targets are for an H200; this device is {next(iter(raw.values()))['device']}"
        )
    if bridge and hf:
        ratio = bridge["tokens_per_s"] / hf["tokens_per_s"]
        met = "met" if ratio >= TARGET_RATIO else "NOT met"
        lines.append(f"target bridge >= {TARGET_RATIO}x HF tokens/s: {met} ({ratio:.2f}x)")
    else:
        lines.append(f"target bridge >= {TARGET_RATIO}x HF tokens/s: not evaluated (a side did not run)")
    if bridge and bridge["mfu"] is not None and raw["bridge"]["settings"]["compute"] == "bf16":
        met = "met" if bridge["mfu"] >= TARGET_MFU else "NOT met"
        lines.append(f"target bridge MFU >= {TARGET_MFU:.0%} (bf16): {met} ({bridge['mfu'] * 100:.1f}%)")
    else:
        lines.append(
            f"target bridge MFU >= {TARGET_MFU:.0%} (bf16): not evaluated (no bf16 MFU for this run)"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
