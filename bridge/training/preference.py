"""Preference optimisation: the DPO loss (Rafailov et al. 2023, eq. 7), IPO's (Azar et al. 2023, eq. 17)
and the reference model's log-probabilities, in Megatron-Core's schedule contract.

A micro batch holds m (chosen, rejected) pairs as 2m rows (bridge.training.data.preference). The log-prob
of a row's answer is minus the sum of Megatron-Core's per-token cross entropy over its loss mask: the
model computes that cross entropy vocab-parallel (TP) on the last pipeline stage, so every layout gives
the full vocabulary's log-softmax without gathering logits.

Each step first runs the reference over the step's micro batches (forward only, Megatron-Core's schedule
over the same layout), then the policy over the same micro batches with the reference's log-probs
attached (bridge.training.frozen_pass). The reference is the policy with its PEFT adapters switched off
(`adapters_off`: no second copy), or a frozen copy of the weights training started from (`frozen_copy`).

Per pair, with r = beta * (log pi(y) - log ref(y)) the implicit rewards and z = r_chosen - r_rejected:
    sigmoid: -(1 - eps) log sigmoid(z) - eps log sigmoid(-z)   (eps: dpo.label_smoothing)
    ipo:     (z / beta - 1 / (2 beta))^2 with log-probs averaged over each answer's tokens (as TRL does)
The step's loss is the mean over its pairs; the rewards, their margin and accuracy (the fraction of
pairs with r_chosen > r_rejected) are logged beside it, the rewards from the summed log-probs for every loss
type (as TRL's DPOTrainer logs them, IPO included).
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import torch

from bridge.config.run_plan import DPOPlan
from bridge.peft import adapters_disabled
from bridge.training import forward_step
from bridge.training.data.blend import SOURCE_KEY
from bridge.training.frozen_pass import FrozenPass, frozen_chunks, frozen_report, unwrap
from bridge.training.source_losses import by_source, source_report

ROWS = ("tokens", "labels", "loss_mask", "position_ids")
OBJECTIVE = "dpo loss"
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")


def _flatten_pairs(batch: dict) -> dict:
    """[m, 2, s] -> [2m, s] rows: chosen_0, rejected_0, chosen_1, ..."""
    out = dict(batch)
    for name in ROWS:
        out[name] = batch[name].reshape(-1, batch[name].shape[-1])
    return out


def answer_logps(per_token_loss: torch.Tensor, loss_mask: torch.Tensor, average: bool) -> torch.Tensor:
    """[m, 2] log-probs of each pair's chosen and rejected answer from the model's per-token cross entropy
    (the sum over the answer, or with `average` its mean per token)."""
    mask = loss_mask.float()
    logps = -(per_token_loss.float() * mask).sum(-1)
    if average:
        logps = logps / mask.sum(-1).clamp(min=1.0)
    return logps.view(-1, 2)


def preference_losses(
    policy: torch.Tensor, reference: torch.Tensor, plan: DPOPlan, tokens: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair losses [m] and the chosen / rejected rewards [m] (detached) from [m, 2] summed log-probs;
    IPO averages them over each answer's `tokens` [m, 2] (as TRL does). The rewards are beta x the summed
    log-ratios for every loss type, as TRL's DPOTrainer logs them."""
    reference = reference.to(policy)
    if plan.loss_type == "ipo":
        count = tokens.to(policy).clamp(min=1.0)
        z = (policy[:, 0] - reference[:, 0]) / count[:, 0] - (policy[:, 1] - reference[:, 1]) / count[:, 1]
        losses = (z - 1.0 / (2.0 * plan.beta)) ** 2
    else:
        z = (policy[:, 0] - policy[:, 1]) - (reference[:, 0] - reference[:, 1])
        eps = plan.label_smoothing
        logsig = torch.nn.functional.logsigmoid
        losses = -(1.0 - eps) * logsig(plan.beta * z) - eps * logsig(-plan.beta * z)
    rewards = (plan.beta * (policy - reference)).detach()
    return losses, rewards[:, 0], rewards[:, 1]


def dpo_loss_func(
    plan: DPOPlan,
    loss_mask: torch.Tensor,
    reference: torch.Tensor,
    output_tensor: torch.Tensor,
    source: torch.Tensor | None = None,
):
    """Megatron-Core's three-value loss over the micro batch's pairs: (loss sum, pair count, report);
    `source` (blended validation pairs, [pairs, sources] one-hot): each source's [sum, pairs] too."""
    policy = answer_logps(output_tensor, loss_mask, average=False)
    tokens = loss_mask.float().sum(-1).view(-1, 2)
    losses, chosen, rejected = preference_losses(policy, reference, plan, tokens)
    m = torch.tensor(float(losses.numel()), device=losses.device)
    loss = losses.sum()

    def pair(total: torch.Tensor) -> torch.Tensor:
        return torch.stack([total.detach().float(), m])

    report = {
        OBJECTIVE: pair(loss),
        "rewards/chosen": pair(chosen.sum()),
        "rewards/rejected": pair(rejected.sum()),
        "rewards/margins": pair((chosen - rejected).sum()),
        "rewards/accuracies": pair((chosen > rejected).float().sum()),
    }
    if source is not None:
        report[by_source(OBJECTIVE)] = source_report(losses, torch.ones_like(losses), source)
    return loss, m.to(torch.int), report


def dpo_forward_step(plan: DPOPlan, data_iterator, model):
    """The policy's forward step: the micro batch's 2m rows through the model, the DPO loss on them."""
    batch = _flatten_pairs(forward_step.get_batch(data_iterator))
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    # the reference log-probs exist on the last stage only, where the loss runs
    return output, partial(
        dpo_loss_func, plan, batch["loss_mask"], batch.get("ref_logps"), source=batch.get(SOURCE_KEY)
    )


def _reference_loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    return frozen_report(answer_logps(output_tensor.detach(), loss_mask, average=False), output_tensor)


def reference_forward_step(data_iterator, model):
    """The reference's summed answer log-probs (IPO averages them in the policy's loss)."""
    batch = _flatten_pairs(forward_step.get_batch(data_iterator))
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return output, partial(_reference_loss_func, batch["loss_mask"])


def reference_pass(plan, policy: list) -> FrozenPass:
    """The step's reference pass. frozen_copy: a second model on the same layout holding the policy's
    current weights (built before the first step: the weights training starts from); adapters_off: the
    policy itself with its adapters switched off."""
    dpo = plan.dpo
    chunks = None
    if dpo.reference == "frozen_copy":
        chunks = frozen_chunks(copy.deepcopy(plan.provider), plan)
        for ref, pol in zip(chunks, policy, strict=True):
            unwrap(ref).load_state_dict(unwrap(pol).state_dict(), strict=True)

    return FrozenPass(
        chunks,
        reference_forward_step,
        key="ref_logps",
        rows_per_sample=2,
        weights=adapters_disabled if chunks is None else None,
        metrics=metrics_of,
    )


def metrics_of(totals: dict[str, Any]) -> dict[str, float]:
    """The logged DPO metrics (means over the step's pairs) from the reduced [sum, count] totals."""
    out = {}
    for key in METRICS:
        if key in totals:
            s, n = totals[key].tolist()
            out[key] = s / max(n, 1.0)
    return out
