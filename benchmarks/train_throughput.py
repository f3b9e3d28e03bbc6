"""Training throughput: bridge's pretrain() vs a plain Hugging Face LlamaForCausalLM + AdamW loop.

Same model (4 layers, hidden 256, ffn 688, 8 heads / 4 KV groups, vocab 32000, untied), same batch
(8 x 512 random tokens from the mock dataset), fp32, Adam(W) lr 3e-4 / betas 0.9,0.95 / wd 0.1, grad clip 1.0,
one rank, in the same run. The first iteration of each is warm-up and not counted. A bare loop over the
same Megatron-Core GPTModel shows what the framework adds on top of the model. Each loop runs in a fresh
process; the loops run in turn, `--rounds` times (HF once more at the end), and the table gives medians
with their spread, so load drifting on a shared machine shows up as a spread instead of skewing a ratio.

    OMP_NUM_THREADS=2 python benchmarks/train_throughput.py [--iters 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bridge.config.run_plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402
    TIMED_RUN_OVERRIDES,
    adamw,
    emit_result,
    hf_llama_config,
    hf_train_step,
    run_worker,
)

LAYERS, HIDDEN, FFN, HEADS, GROUPS, VOCAB, SEQ, BATCH = 4, 256, 688, 8, 4, 32000, 512, 8
LR, BETAS, WD, EPS, CLIP = 3e-4, (0.9, 0.95), 0.1, 1e-5, 1.0


SHAPE = [
    f"model.num_layers={LAYERS}", f"model.hidden_size={HIDDEN}", f"model.ffn_hidden_size={FFN}",
    f"model.num_attention_heads={HEADS}", f"model.num_query_groups={GROUPS}", f"model.vocab_size={VOCAB}",
    f"model.seq_length={SEQ}", "model.share_embeddings_and_output_weights=False", "mixed_precision.precision=fp32",
]  # fmt: skip


def provider():
    from bridge.config.overrides import apply_overrides
    from recipes.llama import llama32_1b_pretrain_config

    # the run's model as pretrain() builds it: the plan's provider (GPU-only settings off on CPU)
    return build_plan(apply_overrides(llama32_1b_pretrain_config(), SHAPE), 1).provider


# With one data-parallel replica Megatron-Core's distributed optimizer has nothing to shard; this
# row shows what it still costs (its in-place collectives, and one copy of the updated parameters).
NO_DISTRIBUTED_OPTIMIZER = [
    "optimizer.use_distributed_optimizer=false",
    "distributed.overlap_param_gather=false",
]


def bridge_tokens_per_second(iters: int, extra: tuple[str, ...] = ()) -> float:
    from bridge.config.overrides import apply_overrides
    from bridge.training import pretrain
    from recipes.llama import llama32_1b_pretrain_config

    cfg = apply_overrides(llama32_1b_pretrain_config(), [
        *SHAPE, *TIMED_RUN_OVERRIDES, f"train.train_iters={iters}", f"train.global_batch_size={BATCH}",
        f"train.micro_batch_size={BATCH}", f"optimizer.lr={LR}", f"optimizer.clip_grad={CLIP}",
        "dataset.num_workers=0", *extra,
    ])  # fmt: skip
    return pretrain(cfg).tokens_per_second


def plain_megatron_tokens_per_second(iters: int) -> float:
    """The same GPTModel in a bare loop (no schedule, DDP, distributed optimizer): the loop's floor."""
    import torch

    from bridge.training.data.loaders import build_iterator
    from bridge.training.data.mock import MockDataset

    (model,) = provider().provide_distributed_model(wrap_with_ddp=False)
    model.train()
    opt = adamw(model, LR, BETAS, EPS, WD)
    data = build_iterator(MockDataset(iters * BATCH, SEQ, VOCAB, seed=1234), 0, BATCH, 0, 1)
    times = []
    for _ in range(iters):
        batch = next(data)
        start = time.perf_counter()
        loss = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"]).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return BATCH * SEQ / statistics.mean(times[1:])


def hf_tokens_per_second(iters: int) -> float:
    import torch
    from transformers import LlamaForCausalLM

    from bridge.training.data.loaders import build_iterator
    from bridge.training.data.mock import MockDataset

    torch.manual_seed(1234)
    model = LlamaForCausalLM(hf_llama_config(provider())).train()  # the same shape, by construction
    opt = adamw(model, LR, BETAS, EPS, WD)
    data = build_iterator(MockDataset(iters * BATCH, SEQ, VOCAB, seed=1234), 0, BATCH, 0, 1)
    times = []
    for _ in range(iters):
        batch = next(data)
        start = time.perf_counter()
        hf_train_step(model, opt, [batch], CLIP)
        times.append(time.perf_counter() - start)
    return BATCH * SEQ / statistics.mean(times[1:])


LOOPS = {
    "hf": hf_tokens_per_second,
    "bridge": bridge_tokens_per_second,
    "plain": plain_megatron_tokens_per_second,
    "bridge_no_dist_opt": lambda iters: bridge_tokens_per_second(iters, tuple(NO_DISTRIBUTED_OPTIMIZER)),
}


def _fresh(loop: str, iters: int) -> float:
    """One loop in its own process: loops run in one process speed up whichever runs later (a warm
    allocator faults fewer fresh pages), which skewed the ratios by several percent."""
    cmd = [sys.executable, __file__, "--worker", loop, "--iters", str(iters)]
    return run_worker(cmd)["tokens_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=6, help="iterations per side, the first is warm-up")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds of all loops in turn; the table gives medians"
    )
    parser.add_argument("--worker", choices=sorted(LOOPS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        emit_result({"tokens_per_second": LOOPS[args.worker](args.iters)})
        return
    import torch

    runs: dict[str, list[float]] = {name: [] for name in LOOPS}
    for _ in range(args.rounds):
        for name in LOOPS:
            runs[name].append(_fresh(name, args.iters))
    runs["hf"].append(_fresh("hf", args.iters))  # HF once more: drift shows as its spread
    med = {name: statistics.median(values) for name, values in runs.items()}

    def cell(name: str) -> str:
        values = runs[name]
        spread = f" [{min(values):.0f}-{max(values):.0f}]" if len(values) > 1 else ""
        return f"{med[name]:.0f}{spread}"

    print(
        f"\nthreads: {torch.get_num_threads()}, batch {BATCH} x {SEQ}, fp32, {args.iters - 1} timed iterations "
        f"each, {args.rounds} round(s): median [min-max] over rounds (HF: rounds + 1 runs)"
    )
    rows = [
        ("Hugging Face LlamaForCausalLM + AdamW", cell("hf")),
        ("Megatron-Core GPTModel, bare loop + AdamW", cell("plain")),
        ("bridge pretrain() (Megatron-Core)", cell("bridge")),
        ("bridge pretrain(), optimizer.use_distributed_optimizer=false", cell("bridge_no_dist_opt")),
        ("ratio bridge / HF", f"{med['bridge'] / med['hf']:.2f}x"),
        ("ratio bridge / bare Megatron-Core loop", f"{med['bridge'] / med['plain']:.2f}x"),
        (
            "ratio bridge (no distributed optimizer) / bare loop",
            f"{med['bridge_no_dist_opt'] / med['plain']:.2f}x",
        ),
    ]
    print(f"| {'loop':<62} | {'tokens/s':>15} |")
    print(f"| {'-' * 62} | {'-' * 15} |")
    for name, value in rows:
        print(f"| {name:<62} | {value:>15} |")


if __name__ == "__main__":
    main()
