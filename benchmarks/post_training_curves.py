"""Loss curves of post-training on a tiny model: bridge's knowledge distillation and DPO step by step,
beside a plain transformers + torch loop on the same micro batches (and TRL's DPOTrainer when trl is
installed), printed as markdown tables.

One process, one rank, CPU, fp32. The models are scripts/dev/make_tiny_model.py's tiny random Llama (the
student / policy) and a 4-layer teacher of the same vocabulary. bridge trains from their Hugging Face
folders (finetune() with distill.teacher, then with dataset.kind=preference) and records the micro batches
its trained model's pass reads; the reference replays exactly those:
- KD: transformers' student and teacher, T^2 KL(softmax(teacher / T) || softmax(student / T)) per token
  from torch.nn.functional.kl_div, the token mean over the step;
- DPO: transformers' policy and a frozen copy of its start, -log sigmoid(beta z) over the answers' summed
  log-probs (Rafailov et al. 2023, eq. 7), the mean over the step's pairs;
- TRL: DPOTrainer's collator and compute_loss on the same pairs;
each with torch.optim.AdamW (Megatron's groups), a constant learning rate and gradient clipping as the
bridge run. The last column is the largest relative difference of the row to bridge.

    PYTHONPATH=. python benchmarks/post_training_curves.py [--iters 8]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import adamw  # noqa: E402

LR, BETAS, EPS, WD, CLIP = 3e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
GLOBAL_BATCH, SEQ, RECORDS = 8, 32, 16
TEMPERATURE, BETA = 2.0, 0.5
TEACHER = dict(num_hidden_layers=4, initializer_range=0.5)  # a peaked teacher: a KL of order 1


def _tiny_script():
    path = Path(__file__).resolve().parents[1] / "scripts" / "dev" / "make_tiny_model.py"
    spec = importlib.util.spec_from_file_location("make_tiny_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _overrides(root: Path, iters: int) -> list[str]:
    hf = root / "student"
    return [
        f"checkpoint.pretrained_checkpoint={hf}", "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={hf}", f"model.seq_length={SEQ}", f"train.global_batch_size={GLOBAL_BATCH}",
        "train.micro_batch_size=1", f"train.train_iters={iters}", "validation.eval_interval=0",
        "validation.eval_iters=0", "checkpoint.save=null", "checkpoint.save_interval=0",
        "logger.tensorboard_dir=null", "logger.log_interval=1", 'dataset.split="1,0,0"',
        "dataset.packed_sequence_size=0", "dataset.num_workers=0", f"dataset.cache_dir={root}/cache",
        "model.calculate_per_token_loss=True", "distributed.average_in_collective=False",
        f"optimizer.lr={LR}", f"optimizer.min_lr={LR}", "scheduler.lr_decay_style=constant",
        "scheduler.lr_warmup_iters=0", f"optimizer.weight_decay={WD}", f"scheduler.start_weight_decay={WD}",
        f"scheduler.end_weight_decay={WD}", f"optimizer.clip_grad={CLIP}", f"optimizer.adam_beta1={BETAS[0]}",
        f"optimizer.adam_beta2={BETAS[1]}", f"optimizer.adam_eps={EPS}",
    ]  # fmt: skip


def run_bridge(overrides: list[str], key: str) -> tuple[dict, list[dict]]:
    """bridge's finetune(): per-iteration losses and the micro batches its trained model read (those
    carrying the frozen pass's `key`)."""
    import bridge.training.forward_step as fs
    from bridge.config.compose import compose
    from bridge.parallel import runtime
    from bridge.training import finetune
    from recipes.llama_finetune import llama32_1b_sft_config

    cfg, _ = compose(llama32_1b_sft_config(), overrides=overrides)
    record: list[dict] = []
    original = fs.get_batch

    def get_batch(data_iterator):
        batch = original(data_iterator)
        if key in batch:
            record.append({k: batch[k].clone() for k in ("tokens", "labels", "loss_mask")})
        return batch

    fs.get_batch = get_batch
    try:
        result = finetune(cfg)
    finally:
        fs.get_batch = original
        runtime.destroy_distributed()
    return result.losses, record


def _step(model, optimizer, loss) -> float:
    import torch

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optimizer.step()
    return float(loss)


def kd_reference(root: Path, batches: list[dict], iters: int) -> dict[int, float]:
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(root / "student", torch_dtype=torch.float32).train()
    teacher = AutoModelForCausalLM.from_pretrained(root / "teacher", torch_dtype=torch.float32).eval()
    optimizer = adamw(model, LR, BETAS, EPS, WD)
    losses = {}
    for it in range(1, iters + 1):
        window = batches[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH]
        tokens = torch.cat([b["tokens"] for b in window])
        mask = torch.cat([b["loss_mask"] for b in window]).float()
        student = torch.log_softmax(model(input_ids=tokens).logits.float() / TEMPERATURE, -1)
        with torch.no_grad():
            target = torch.log_softmax(teacher(input_ids=tokens).logits.float() / TEMPERATURE, -1)
        kl = F.kl_div(student, target, log_target=True, reduction="none").sum(-1) * TEMPERATURE**2
        losses[it] = _step(model, optimizer, (kl * mask).sum() / mask.sum())
    return losses


def dpo_reference(root: Path, batches: list[dict], iters: int) -> dict[int, float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(root / "student", torch_dtype=torch.float32).train()
    frozen = copy.deepcopy(model).eval()
    optimizer = adamw(model, LR, BETAS, EPS, WD)

    def logps(m, tokens, labels, mask):
        picked = torch.log_softmax(m(input_ids=tokens).logits.float(), -1).gather(-1, labels.unsqueeze(-1))
        return (picked.squeeze(-1) * mask).sum(-1).view(-1, 2)

    losses = {}
    for it in range(1, iters + 1):
        window = batches[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH]
        tokens, labels, mask = (torch.cat([b[k].reshape(-1, SEQ) for b in window]) for k in window[0])
        policy = logps(model, tokens, labels, mask.float())
        with torch.no_grad():
            ref = logps(frozen, tokens, labels, mask.float())
        z = (policy[:, 0] - policy[:, 1]) - (ref[:, 0] - ref[:, 1])
        losses[it] = _step(model, optimizer, -torch.nn.functional.logsigmoid(BETA * z).mean())
    return losses


def trl_reference(root: Path, batches: list[dict], iters: int) -> dict[int, float] | None:
    """TRL's DPOTrainer (its collator and compute_loss) on bridge's pairs; None without trl."""
    if importlib.util.find_spec("trl") is None:
        return None
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    model = AutoModelForCausalLM.from_pretrained(root / "student", torch_dtype=torch.float32).train()
    args = DPOConfig(
        output_dir=str(root / "trl"), beta=BETA, loss_type=["sigmoid"], report_to="none", use_cpu=True,
        bf16=False, fp16=False, max_length=None, disable_dropout=True,  # fp32 like the others (TRL: bf16)
    )  # fmt: skip
    trainer = DPOTrainer(
        model=model, ref_model=copy.deepcopy(model).eval(), args=args,
        processing_class=AutoTokenizer.from_pretrained(root / "student"),
        train_dataset=Dataset.from_json(str(root / "pairs.jsonl")).select(range(1)),
    )  # fmt: skip
    examples = []
    for b in batches:  # bridge's rows back to TRL's {"prompt_ids", "chosen_ids", "rejected_ids"}
        rows = []
        for r in range(2):
            tokens, labels, mask = (b[k].reshape(2, SEQ)[r] for k in ("tokens", "labels", "loss_mask"))
            where = mask.nonzero().view(-1).tolist()
            ids = tokens[: where[-1] + 1].tolist() + [int(labels[where[-1]])]
            rows.append((ids[: where[0] + 1], ids[where[0] + 1 :]))
        examples.append({"prompt_ids": rows[0][0], "chosen_ids": rows[0][1], "rejected_ids": rows[1][1]})
    optimizer = adamw(trainer.model, LR, BETAS, EPS, WD)
    losses = {}
    for it in range(1, iters + 1):
        inputs = trainer.data_collator(examples[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH])
        losses[it] = _step(trainer.model, optimizer, trainer.compute_loss(trainer.model, inputs))
    return losses


def table(title: str, columns: dict[str, dict[int, float]], iters: int) -> str:
    names = list(columns)
    lines = [f"**{title}**", "", "| step | " + " | ".join(names) + " | max rel. diff to bridge |"]
    lines.append("|" + " --- |" * (len(names) + 2))
    for it in range(1, iters + 1):
        values = [columns[n][it] for n in names]
        diff = max(abs(v - values[0]) / max(abs(values[0]), 1e-12) for v in values[1:])
        lines.append(f"| {it} | " + " | ".join(f"{v:.7f}" for v in values) + f" | {diff:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=8)
    args = parser.parse_args()
    tiny = _tiny_script()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tiny.make_tiny_llama(root / "student")
        tiny.make_tiny_llama(root / "teacher", seed=1, **TEACHER)
        tiny.write_sft_jsonl(root / "sft.jsonl", RECORDS, seed=2)
        tiny.write_preference_jsonl(root / "pairs.jsonl", RECORDS, seed=3)
        base = _overrides(root, args.iters)
        kd = [
            f"dataset.data_paths=[{root}/sft.jsonl]", "dataset.kind=sft", f"distill.teacher={root}/teacher",
            f"distill.logit_kl_temperature={TEMPERATURE}", "distill.skip_lm_loss=True",
        ]  # fmt: skip
        kd_bridge, kd_batches = run_bridge([*base, *kd], "teacher_logits")
        dpo = [f"dataset.data_paths=[{root}/pairs.jsonl]", "dataset.kind=preference", f"dpo.beta={BETA}"]
        dpo_bridge, dpo_batches = run_bridge([*base, *dpo], "ref_logps")
        kd_columns = {"bridge": kd_bridge, "transformers + torch": kd_reference(root, kd_batches, args.iters)}
        dpo_columns = {
            "bridge": dpo_bridge,
            "transformers + torch": dpo_reference(root, dpo_batches, args.iters),
        }
        trl = trl_reference(root, dpo_batches, args.iters)
        if trl is not None:
            dpo_columns["TRL DPOTrainer"] = trl
    import platform

    import torch

    print(f"\nPython {platform.python_version()}, torch {torch.__version__}, fp32 CPU, 1 rank\n")
    print(table(f"KD loss (T={TEMPERATURE}, KD alone)", kd_columns, args.iters) + "\n")
    print(table(f"DPO loss (sigmoid, beta={BETA})", dpo_columns, args.iters))
    if trl is None:
        print("\n(trl is not installed: no TRL column)")


if __name__ == "__main__":
    main()
