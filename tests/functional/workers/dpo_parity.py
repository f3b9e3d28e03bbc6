"""DPO / IPO against transformers + torch (issue 48): bridge's finetune() on preference pairs from a Hugging
Face folder, against a plain transformers + torch.optim.AdamW loop written here from the DPO paper's loss
(Rafailov et al. 2023, eq. 7) and IPO's (Azar et al. 2023, eq. 17 with TRL's per-token averaging).

`ref` (1 rank): writes the finetuning fixtures' tiny Llama + tokenizer and PAIRS preference records; per
case runs bridge at TP=1 recording every micro batch its policy pass trains on (the pairs' rows, as
bridge's data put them), then replays exactly those through the reference: the policy is the HF model
being trained, the reference a frozen copy of the HF model it started from (peft's LoRA model with its
adapters switched off for the LoRA case, started from bridge's initial A and B). `layouts` (2 ranks):
the full DPO case at TP=2, PP=2 and DP=2, in sequence. Each run emits per iteration the loss, the grad
norm (before clipping), the learning rate and (TP=1) DPO's reward metrics.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from train_common import emit, reset_parallel_state
from training_parity_hf import (
    CLIP,
    GLOBAL_BATCH,
    LORA_DIM,
    LORA_TARGETS,
    lr_at,
    megatron_adamw,
    overrides,
    peft_model,
    record_adapters,
)

from tests.finetune_fixtures import _tiny, make_tiny_llama

ITERS = 5
PAIRS = 8  # = GLOBAL_BATCH: one step sees every pair
BETA = 0.5
LAYOUTS = {
    "tp2": ["model.tensor_model_parallel_size=2"],
    "pp2": ["model.pipeline_model_parallel_size=2"],
    "dp2": [],  # each data-parallel rank runs the reference over its own micro batches
}


def dpo_overrides(workdir: str, loss_type: str) -> list[str]:
    hf = f"{workdir}/hf"
    common = [o for o in overrides(workdir, "sft") if not o.startswith(("dataset.", "checkpoint.pretrained"))]
    return [
        *common,
        f"checkpoint.pretrained_checkpoint={hf}",
        "dataset.kind=preference",
        f"dataset.data_paths=[{workdir}/pairs.jsonl]",
        'dataset.split="1,0,0"',
        "dataset.packed_sequence_size=0",
        "dataset.num_workers=0",
        "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={hf}",
        f"dpo.beta={BETA}",
        f"dpo.loss_type={loss_type}",
    ]


def dpo_config(workdir: str, loss_type: str = "sigmoid", lora: bool = False, *extra: str):
    from bridge.config.compose import compose
    from recipes.llama_finetune import llama32_1b_peft_config, llama32_1b_sft_config

    more = []
    if lora:
        targets = ",".join(t.split(".")[-1] for t in LORA_TARGETS)
        more = [
            f"peft.target_modules=[{targets}]",
            f"peft.dim={LORA_DIM}",
            "peft.alpha=8.0",
            "peft.dropout=0.0",
        ]
    recipe = llama32_1b_peft_config if lora else llama32_1b_sft_config
    cfg, _ = compose(recipe(), overrides=[*dpo_overrides(workdir, loss_type), *more, *extra])
    return cfg


def run_bridge(name: str, cfg, record: list | None = None) -> None:
    import bridge.training.forward_step as fs
    from bridge.training import finetune

    original = getattr(fs.get_batch, "__wrapped__", fs.get_batch)

    def get_batch(data_iterator):
        batch = original(data_iterator)
        if record is not None and "ref_logps" in batch:  # the policy pass (the reference pass has none)
            record.append({k: batch[k].clone() for k in ("tokens", "labels", "loss_mask", "ref_logps")})
        return batch

    get_batch.__wrapped__ = original
    fs.get_batch = get_batch
    try:
        result = finetune(cfg)
    finally:
        fs.get_batch = original
    emit(
        "run",
        {
            "run": name,
            "losses": result.losses,
            "grad_norms": result.grad_norms,
            "learning_rates": result.learning_rates,
            "metrics": result.metrics,
        },
    )
    reset_parallel_state()


def answer_logps(model, tokens, labels, mask, average: bool):
    """[n] log-probs of each row's answer: transformers' logits, log-softmax, the labels' entries."""
    import torch

    logits = model(input_ids=tokens).logits.float()
    picked = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    logps = (picked * mask).sum(-1)
    return logps / mask.sum(-1) if average else logps


def run_reference(
    workdir: str, name: str, batches: list[dict], loss_type: str, lora_init: dict | None = None
):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(f"{workdir}/hf", torch_dtype=torch.float32).train()
    frozen = copy.deepcopy(model).eval()
    if lora_init is not None:
        model = peft_model(model, lora_init)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = megatron_adamw(trainable, lr_at(0))
    losses, grad_norms, lrs, metrics = {}, {}, {}, {}
    for it in range(1, ITERS + 1):
        window = batches[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH]
        s = window[0]["tokens"].shape[-1]
        tokens = torch.cat([b["tokens"].reshape(-1, s) for b in window])  # chosen_0, rejected_0, ...
        labels = torch.cat([b["labels"].reshape(-1, s) for b in window])
        mask = torch.cat([b["loss_mask"].reshape(-1, s) for b in window]).float()
        optimizer.zero_grad()
        policy = answer_logps(model, tokens, labels, mask, False).view(-1, 2)
        with torch.no_grad():
            if lora_init is not None:
                with model.disable_adapter():
                    ref = answer_logps(model, tokens, labels, mask, False).view(-1, 2)
            else:
                ref = answer_logps(frozen, tokens, labels, mask, False).view(-1, 2)
        z = (policy[:, 0] - policy[:, 1]) - (ref[:, 0] - ref[:, 1])
        if loss_type == "ipo":  # eq. 17 on log-ratios averaged per answer token (TRL's normalisation)
            ratio = (policy - ref) / mask.sum(-1).view(-1, 2)
            loss = ((ratio[:, 0] - ratio[:, 1] - 1.0 / (2.0 * BETA)) ** 2).mean()
        else:
            loss = -torch.nn.functional.logsigmoid(BETA * z).mean()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], CLIP)
        for group in optimizer.param_groups:
            group["lr"] = lr_at((it - 1) * GLOBAL_BATCH)
        optimizer.step()
        # the rewards: beta x the summed log-ratios for every loss type (what TRL's DPOTrainer logs)
        chosen, rejected = (BETA * (policy - ref)).detach().unbind(-1)
        metrics[it] = {
            "rewards/chosen": float(chosen.mean()),
            "rewards/rejected": float(rejected.mean()),
            "rewards/margins": float((chosen - rejected).mean()),
            "rewards/accuracies": float((chosen > rejected).float().mean()),
        }
        losses[it], grad_norms[it], lrs[it] = float(loss), float(norm), lr_at(it * GLOBAL_BATCH)
    emit(
        "run",
        {"run": name, "losses": losses, "grad_norms": grad_norms, "learning_rates": lrs, "metrics": metrics},
    )


def run_trl_if_installed(workdir: str, batches: list[dict], loss_type: str) -> None:
    """TRL's DPOTrainer over the same micro batches (workers/dpo_trl.py); without trl, a record saying so."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        emit("trl_missing", {"reason": "trl is not installed (pip install trl, or the project's test extra)"})
        return
    from dpo_trl import run_trl

    emit("run", {"run": f"trl_{loss_type}", **run_trl(workdir, batches, loss_type, BETA, ITERS)})


def main(mode: str, workdir: str) -> None:
    if mode == "ref":
        make_tiny_llama(Path(workdir) / "hf")
        _tiny.write_preference_jsonl(Path(workdir) / "pairs.jsonl", PAIRS, seed=3)
        for loss_type in ("sigmoid", "ipo"):
            batches: list[dict] = []
            run_bridge(f"{loss_type}_tp1", dpo_config(workdir, loss_type), record=batches)
            run_reference(workdir, f"torch_{loss_type}", batches, loss_type)
            run_trl_if_installed(workdir, batches, loss_type)
        batches, adapters = [], {}
        record_adapters(adapters)
        run_bridge("lora_tp1", dpo_config(workdir, "sigmoid", True), record=batches)
        run_reference(workdir, "peft_lora", batches, "sigmoid", lora_init=adapters)
    elif mode == "layouts":
        for name, extra in LAYOUTS.items():
            run_bridge(f"sigmoid_{name}", dpo_config(workdir, "sigmoid", False, *extra))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
