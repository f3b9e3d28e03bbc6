"""LoRA finetuning throughput and peak memory: bridge's finetune() vs Hugging Face transformers + peft.

Same model (a random Llama saved as a Hugging Face folder: 4 layers, hidden 256, ffn 688, 8 heads / 4 KV
groups, vocab 32000, untied), same LoRA (r 32, alpha 32, no dropout, on q/k/v/o/gate/up/down = bridge's
linear_qkv/linear_proj/linear_fc1/linear_fc2), same data (SFT records of token ids, each exactly one
8 x 512 batch row, loss on every token), fp32, AdamW lr 1e-4 / betas 0.9,0.98 / wd 0.1, grad clip 1.0, one
process each, in the same run. bridge starts from the HF folder (weights streamed in at build). Each side
runs in a fresh subprocess so its peak RSS is its own; the first iteration is warm-up and not counted. The
HF loop runs before and after bridge and the ratio uses their mean (load drift shows as their spread).

    OMP_NUM_THREADS=2 python benchmarks/finetune_throughput.py [--iters 6]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import adamw, emit_result, run_worker  # noqa: E402

LAYERS, HIDDEN, FFN, HEADS, GROUPS, VOCAB, SEQ, BATCH = 4, 256, 688, 8, 4, 32000, 512, 8
LR, BETAS, WD, EPS, CLIP = 1e-4, (0.9, 0.98), 0.1, 1e-5, 1.0
RANK, ALPHA = 32, 32
HF_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_inputs(root: Path, iters: int) -> tuple[Path, Path]:
    """The HF folder and the SFT JSONL (token ids; input + output + eod = SEQ + 1 ids per record)."""
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=GROUPS, max_position_embeddings=SEQ,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(root / "hf")
    rng = np.random.default_rng(0)
    half = SEQ // 2
    with (root / "train.jsonl").open("w") as f:
        for _ in range(iters * BATCH):
            ids = rng.integers(0, VOCAB - 1, size=SEQ).tolist()  # VOCAB - 1 is the NullTokenizer's eod
            f.write(
                json.dumps(
                    {"input": " ".join(map(str, ids[:half])), "output": " ".join(map(str, ids[half:]))}
                )
            )
            f.write("\n")
    return root / "hf", root / "train.jsonl"


def bridge_side(hf: Path, data: Path, iters: int) -> float:
    from bridge.config.compose import compose
    from bridge.training import finetune
    from recipes.llama_finetune import llama32_1b_peft_config

    cfg, _ = compose(llama32_1b_peft_config(), overrides=[
        f"checkpoint.pretrained_checkpoint={hf}", "tokenizer.tokenizer_type=NullTokenizer",
        f"tokenizer.vocab_size={VOCAB - 1}", "dataset.kind=sft", f"dataset.data_paths=[{data}]",
        "dataset.packed_sequence_size=0", "dataset.answer_only_loss=false", "dataset.split=\"1,0,0\"",
        f"model.seq_length={SEQ}", "mixed_precision.precision=fp32", f"train.train_iters={iters}",
        f"train.global_batch_size={BATCH}", f"train.micro_batch_size={BATCH}", "scheduler.lr_warmup_iters=0",
        f"optimizer.lr={LR}", f"optimizer.adam_beta2={BETAS[1]}", f"optimizer.weight_decay={WD}",
        f"scheduler.start_weight_decay={WD}", f"scheduler.end_weight_decay={WD}",
        f"optimizer.clip_grad={CLIP}", f"peft.dim={RANK}", f"peft.alpha={ALPHA}", "validation.eval_interval=0",
        "checkpoint.save=null", "checkpoint.save_interval=0", "logger.tensorboard_dir=null",
        "logger.log_interval=1", "dataset.num_workers=0", "train.manual_gc=false",
    ])  # fmt: skip
    return finetune(cfg).tokens_per_second


def hf_side(hf: Path, data: Path, iters: int) -> float:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(1234)
    model = LlamaForCausalLM.from_pretrained(hf, attn_implementation="sdpa", dtype=torch.float32)
    model = get_peft_model(
        model, LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=HF_TARGETS)
    ).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(model, LR, BETAS, EPS, WD)  # the adapters only: the base is frozen
    rows = []
    for line in data.read_text().splitlines():
        record = json.loads(line)
        rows.append([int(x) for x in (record["input"] + " " + record["output"]).split()] + [VOCAB - 1])
    all_ids = torch.tensor(rows)
    times = []
    for step in range(iters):
        ids = all_ids[step * BATCH : (step + 1) * BATCH]
        start = time.perf_counter()
        logits = model(input_ids=ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return BATCH * SEQ / statistics.mean(times[1:])


def run_side(side: str, root: Path, iters: int) -> dict:
    return run_worker([sys.executable, __file__, "--side", side, "--root", str(root), "--iters", str(iters)])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=6, help="iterations per side, the first is warm-up")
    parser.add_argument("--side", choices=["bridge", "hf"], help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        root = Path(args.root)
        side = bridge_side if args.side == "bridge" else hf_side
        tps = side(root / "hf", root / "train.jsonl", args.iters)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        emit_result({"tokens_per_second": tps, "peak_rss": peak})
        return
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_inputs(root, args.iters)
        hf_before = run_side("hf", root, args.iters)
        ours = run_side("bridge", root, args.iters)
        hf_after = run_side("hf", root, args.iters)
    hf = (hf_before["tokens_per_second"] + hf_after["tokens_per_second"]) / 2
    hf_peak = max(hf_before["peak_rss"], hf_after["peak_rss"])
    print(
        f"\nthreads: {torch.get_num_threads()}, batch {BATCH} x {SEQ}, fp32, LoRA r {RANK} on 7 projections, "
        f"{args.iters - 1} timed iterations each"
    )
    print(f"| {'loop':<46} | {'tokens/s':>9} | {'peak RSS (MB)':>13} |")
    print(f"| {'-' * 46} | {'-' * 9} | {'-' * 13} |")
    for name, r in (
        ("Hugging Face transformers + peft (before)", hf_before),
        ("bridge finetune() (Megatron-Core)", ours),
        ("Hugging Face transformers + peft (after)", hf_after),
    ):
        print(f"| {name:<46} | {r['tokens_per_second']:>9.0f} | {r['peak_rss'] / 1e6:>13.0f} |")
    print(
        f"| {'ratio bridge / mean HF (tokens/s)':<46} | {ours['tokens_per_second'] / hf:>8.2f}x | {'':>13} |"
    )
    print(f"| {'ratio bridge / HF (peak RSS)':<46} | {'':>9} | {ours['peak_rss'] / hf_peak:>12.2f}x |")


if __name__ == "__main__":
    main()
