"""TRL's DPOTrainer on the micro batches bridge trained on (issue 48): its own collator
(DataCollatorForPreference) and loss (`DPOTrainer.compute_loss`, TRL 1.16: the fused LM head's completion
log-probs, the frozen reference model, the sigmoid / IPO loss, the rewards metrics), driven step by step
with torch.optim.AdamW under the schedule, weight-decay groups and clipping bridge's run used, so the
per-step loss, grad norm and rewards are comparable with bridge's.
"""

from __future__ import annotations

import copy

from training_parity_hf import CLIP, GLOBAL_BATCH, lr_at, megatron_adamw

METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")


def pair_examples(batches: list[dict]) -> list[dict]:
    """TRL's pre-tokenized examples {"prompt_ids", "chosen_ids", "rejected_ids"} of bridge's [2, s] pair rows:
    a row's ids are its tokens up to its last loss token plus that token's label; the answer starts one past
    the first loss position (bridge shifts the labels by one)."""
    out = []
    for batch in batches:
        tokens, labels, mask = (
            batch[k].reshape(-1, 2, batch[k].shape[-1]) for k in ("tokens", "labels", "loss_mask")
        )
        for m in range(tokens.shape[0]):
            rows = []
            for r in range(2):
                where = mask[m, r].nonzero().view(-1).tolist()
                first, last = where[0], where[-1]
                ids = tokens[m, r, : last + 1].tolist() + [int(labels[m, r, last])]
                rows.append((ids[: first + 1], ids[first + 1 :]))
            assert rows[0][0] == rows[1][0], "a pair's two rows share the prompt"
            out.append({"prompt_ids": rows[0][0], "chosen_ids": rows[0][1], "rejected_ids": rows[1][1]})
    return out


def run_trl(workdir: str, batches: list[dict], loss_type: str, beta: float, iters: int) -> dict:
    """Per iteration: TRL's loss, the grad norm before clipping, the learning rate and TRL's reward metrics."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    hf = f"{workdir}/hf"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).train()
    ref = copy.deepcopy(model).eval()
    examples = pair_examples(batches)
    args = DPOConfig(
        output_dir=f"{workdir}/trl_{loss_type}", beta=beta, loss_type=[loss_type], report_to="none",
        use_cpu=True, bf16=False, fp16=False, per_device_train_batch_size=GLOBAL_BATCH, max_length=None,
        dataset_num_proc=None, disable_dropout=True,
    )  # fmt: skip
    trainer = DPOTrainer(
        model=model,
        ref_model=ref,
        args=args,
        processing_class=AutoTokenizer.from_pretrained(hf),
        # TRL tokenizes the records it is given; the steps below feed it bridge's micro batches instead
        train_dataset=Dataset.from_json(f"{workdir}/pairs.jsonl").select(range(1)),
    )
    policy = trainer.model
    trainable = [(n, p) for n, p in policy.named_parameters() if p.requires_grad]
    optimizer = megatron_adamw(trainable, lr_at(0))
    losses, grad_norms, lrs, metrics = {}, {}, {}, {}
    for it in range(1, iters + 1):
        window = examples[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH]
        inputs = trainer.data_collator(window)
        optimizer.zero_grad()
        loss = trainer.compute_loss(policy, inputs)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], CLIP)
        for group in optimizer.param_groups:
            group["lr"] = lr_at((it - 1) * GLOBAL_BATCH)
        optimizer.step()
        logged = trainer._metrics["train"]  # what TRL logs for the step
        metrics[it] = {key: float(logged[key][-1]) for key in METRICS}
        losses[it], grad_norms[it], lrs[it] = float(loss), float(norm), lr_at(it * GLOBAL_BATCH)
    return {"losses": losses, "grad_norms": grad_norms, "learning_rates": lrs, "metrics": metrics}
