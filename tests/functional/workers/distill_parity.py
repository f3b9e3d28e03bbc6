"""Knowledge distillation against transformers + torch (issue 48): bridge's finetune() of the finetuning
fixtures' tiny Llama (the student) on SFT records with a 4-layer teacher from its own Hugging Face folder
(same tokenizer), against a plain loop written here: transformers' student and teacher on the micro
batches bridge trained on, T^2 KL(softmax(teacher / T) || softmax(student / T)) per token from
torch.nn.functional.kl_div (top-k: over torch.topk of the teacher's logits, both renormalised there),
the token mean over the step, torch.optim.AdamW as in training_parity_hf.

`ref` (1 rank): the KD loss alone at T=2 (`kd`), and lm loss + 0.5 x KD over the teacher's top 8 tokens
(`mixed_topk`), each at TP=1 against the reference. `layouts` (2 ranks): both at TP=2 (the vocabulary
split over the ranks: the vocab-parallel KL must equal the full one) and `kd` at PP=2 and DP=2.
"""

from __future__ import annotations

import sys
from pathlib import Path

from train_common import emit, reset_parallel_state
from training_parity_hf import BETAS, CLIP, EPS, GLOBAL_BATCH, ITERS, WEIGHT_DECAY, lr_at, sft_overrides

from tests.finetune_fixtures import make_tiny_llama, write_sft_jsonl

CASES = {
    "kd": dict(temperature=2.0, skip_lm_loss=True, scale=1.0, top_k=None),
    "mixed_topk": dict(temperature=1.0, skip_lm_loss=False, scale=0.5, top_k=8),
}
LAYOUTS = {"tp2": ["model.tensor_model_parallel_size=2"], "pp2": ["model.pipeline_model_parallel_size=2"]}
# a peaked teacher (wider initialisation): KL(teacher || student) of order 1, so fp32 rounding of its
# ~4-nat terms (~1e-6 absolute) stays far below the 1e-5 relative bound
TEACHER = dict(num_hidden_layers=4, initializer_range=0.5)


def distill_config(workdir: str, case: str, *extra: str, teacher: str = "teacher"):
    from bridge.config.compose import compose
    from recipes.llama_finetune import llama32_1b_sft_config

    c = CASES[case]
    more = [
        f"distill.teacher={workdir}/{teacher}",
        f"distill.logit_kl_temperature={c['temperature']}",
        f"distill.skip_lm_loss={c['skip_lm_loss']}",
        f"distill.kd_loss_scale={c['scale']}",
        f"distill.top_k={'null' if c['top_k'] is None else c['top_k']}",
    ]
    cfg, _ = compose(llama32_1b_sft_config(), overrides=[*sft_overrides(workdir), *more, *extra])
    return cfg


def run_bridge(name: str, cfg, record: list | None = None) -> None:
    import bridge.training.forward_step as fs
    from bridge.training import finetune

    original = getattr(fs.get_batch, "__wrapped__", fs.get_batch)

    def get_batch(data_iterator):
        batch = original(data_iterator)
        if record is not None and "teacher_logits" in batch:  # the student's pass
            record.append({k: batch[k].clone() for k in ("tokens", "labels", "loss_mask")})
        return batch

    get_batch.__wrapped__ = original
    fs.get_batch = get_batch
    try:
        result = finetune(cfg)
    finally:
        fs.get_batch = original
    emit("run", {"run": name, "losses": result.losses, "grad_norms": result.grad_norms,
                 "learning_rates": result.learning_rates, "metrics": result.metrics})  # fmt: skip
    reset_parallel_state()


def kd_reference(student_logits, teacher_logits, temperature: float, top_k: int | None):
    """T^2 KL(p_teacher || q_student) per token with torch's kl_div (top-k: over the teacher's top k)."""
    import torch
    import torch.nn.functional as F

    s, t = student_logits / temperature, teacher_logits / temperature
    if top_k is not None:
        index = teacher_logits.topk(top_k, dim=-1).indices
        s, t = s.gather(-1, index), t.gather(-1, index)
    kl = F.kl_div(torch.log_softmax(s, -1), torch.log_softmax(t, -1), log_target=True, reduction="none")
    return kl.sum(-1) * temperature**2


def run_reference(workdir: str, case: str, batches: list[dict]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    c = CASES[case]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(f"{workdir}/hf_sft", torch_dtype=torch.float32).train()
    teacher = AutoModelForCausalLM.from_pretrained(f"{workdir}/teacher", torch_dtype=torch.float32).eval()
    params = list(model.named_parameters())
    decay = [p for n, p in params if p.ndim > 1 and not n.endswith(".bias")]
    no_decay = [p for n, p in params if p.ndim <= 1 or n.endswith(".bias")]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr_at(0), betas=BETAS, eps=EPS,
    )  # fmt: skip
    losses, grad_norms, lrs, metrics = {}, {}, {}, {}
    for it in range(1, ITERS + 1):
        window = batches[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH]
        tokens = torch.cat([b["tokens"] for b in window])
        labels = torch.cat([b["labels"] for b in window])
        mask = torch.cat([b["loss_mask"] for b in window]).float()
        optimizer.zero_grad()
        logits = model(input_ids=tokens).logits.float()
        with torch.no_grad():
            t_logits = teacher(input_ids=tokens).logits.float()
        kd = (kd_reference(logits, t_logits, c["temperature"], c["top_k"]) * mask).sum() / mask.sum()
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        )
        lm = (ce * mask.reshape(-1)).sum() / mask.sum()
        loss = kd if c["skip_lm_loss"] else lm + c["scale"] * kd
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], CLIP)
        for group in optimizer.param_groups:
            group["lr"] = lr_at((it - 1) * GLOBAL_BATCH)
        optimizer.step()
        losses[it], grad_norms[it], lrs[it] = float(loss), float(norm), lr_at(it * GLOBAL_BATCH)
        metrics[it] = {"kd loss": float(kd), "lm loss": float(lm)}
    emit("run", {"run": f"torch_{case}", "losses": losses, "grad_norms": grad_norms, "learning_rates": lrs,
                 "metrics": metrics})  # fmt: skip


def main(mode: str, workdir: str) -> None:
    if mode == "ref":
        make_tiny_llama(Path(workdir) / "hf_sft")
        make_tiny_llama(Path(workdir) / "teacher", seed=1, **TEACHER)
        write_sft_jsonl(Path(workdir) / "sft.jsonl", GLOBAL_BATCH, seed=5)
        for case in CASES:
            batches: list[dict] = []
            run_bridge(f"{case}_tp1", distill_config(workdir, case), record=batches)
            run_reference(workdir, case, batches)
    elif mode == "layouts":
        for case in CASES:
            run_bridge(f"{case}_tp2", distill_config(workdir, case, *LAYOUTS["tp2"]))
        run_bridge("kd_pp2", distill_config(workdir, "kd", *LAYOUTS["pp2"]))
        run_bridge("kd_dp2", distill_config(workdir, "kd"))  # each data-parallel rank's own teacher pass
        # the teacher as a bridge checkpoint: imported on both ranks at TP=1 (DP=2), loaded at TP=2
        from bridge.conversion.auto_bridge import AutoBridge

        AutoBridge.import_ckpt(f"{workdir}/teacher", f"{workdir}/teacher_ckpt")
        reset_parallel_state()
        run_bridge(
            "kd_tp2_teacher_ckpt", distill_config(workdir, "kd", *LAYOUTS["tp2"], teacher="teacher_ckpt")
        )
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
