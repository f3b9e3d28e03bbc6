"""Knowledge distillation: the student's next-token distribution pulled toward a frozen teacher's, in
Megatron-Core's schedule contract.

Per token, with T = distill.logit_kl_temperature, p = softmax(teacher logits / T), q = softmax(student
logits / T):
    kd = T^2 KL(p || q) = T^2 sum_v p_v (log p_v - log q_v)
over the whole vocabulary, or with distill.top_k over the teacher's k most likely tokens, both
distributions renormalised there (vocabulary padding rows never count). The step's loss is the token mean
of kd over the loss mask (skip_lm_loss), or lm loss + kd_loss_scale x that mean.

Tensor parallelism splits the vocabulary: each rank holds V / tp columns of both logits. The log-softmax's
max and normaliser and the KL's sum are all-reduced over the tensor-parallel group, so the result equals
the full vocabulary's. Backward: the KL's sum through Megatron-Core's reduce_from_tensor_model_parallel_region
(identity: each rank's share of the sum gets the loss's gradient), the student's normaliser through an
all-reduce both ways (every rank's columns use it, so its gradient sums over the ranks). The teacher runs
first over the step's micro batches (bridge.training.frozen_pass), its logits attached to them.
"""

from __future__ import annotations

import copy
from functools import partial

import torch

from bridge.checkpoint import load_checkpoint
from bridge.config.distill_rules import DistillPlan
from bridge.training import forward_step
from bridge.training.data.blend import SOURCE_KEY
from bridge.training.frozen_pass import FrozenPass, frozen_chunks, frozen_report
from bridge.training.source_losses import by_source, source_report

METRICS = ("kd loss", "lm loss")


def _tp():
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_group(), parallel_state.get_tensor_model_parallel_rank()


def kept_columns(teacher: torch.Tensor, vocab_size: int, top_k: int | None) -> torch.Tensor:
    """[..., V_local] bool: this rank's columns inside the real vocabulary (and the teacher's top k)."""
    group, rank = _tp()
    local = teacher.shape[-1]
    index = torch.arange(local, device=teacher.device) + rank * local
    keep = (index < vocab_size).expand_as(teacher)
    if top_k is None:
        return keep
    masked = teacher.masked_fill(~keep, float("-inf"))
    k = min(top_k, local)
    local_top = masked.topk(k, dim=-1).values  # the global top k lies in the union of the ranks' top k
    if group.size() > 1:
        gathered = [torch.empty_like(local_top) for _ in range(group.size())]
        torch.distributed.all_gather(gathered, local_top.contiguous(), group=group)
        local_top = torch.cat(gathered, dim=-1)
    threshold = local_top.topk(min(top_k, local_top.shape[-1]), dim=-1).values[..., -1:]
    return keep & (masked >= threshold)


def _log_softmax(x: torch.Tensor, keep: torch.Tensor, grad: bool) -> torch.Tensor:
    """log softmax over the kept columns of all tensor-parallel ranks (-inf elsewhere)."""
    group, _ = _tp()
    x = x.masked_fill(~keep, float("-inf"))
    top = x.detach().max(dim=-1, keepdim=True).values
    if group.size() > 1:
        torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX, group=group)
    sum_exp = (x - top).exp().sum(dim=-1, keepdim=True)
    if group.size() > 1:
        sum_exp = _AllReduceSum.apply(sum_exp, group) if grad else _all_reduced(sum_exp, group)
    return x - top - sum_exp.log()


def _all_reduced(x: torch.Tensor, group) -> torch.Tensor:
    x = x.clone()
    torch.distributed.all_reduce(x, group=group)
    return x


class _AllReduceSum(torch.autograd.Function):
    """The sum over the group, forward and backward: every rank's columns use the one normaliser, so its
    gradient is the sum of all ranks' (Megatron-Core's reduce_from_... region has an identity backward,
    right only where each rank's result is used by that rank alone)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return _all_reduced(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.clone()
        torch.distributed.all_reduce(grad, group=ctx.group)
        return grad, None


def kd_per_token(
    student: torch.Tensor, teacher: torch.Tensor, plan: DistillPlan, vocab_size: int
) -> torch.Tensor:
    """T^2 KL(teacher || student) per token, [..., V_local] logits -> [...] (the full vocabulary's)."""
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

    t = plan.temperature
    teacher = teacher.float().to(student.device)
    keep = kept_columns(teacher, vocab_size, plan.top_k)
    log_p = _log_softmax(teacher / t, keep, grad=False)
    log_q = _log_softmax(student.float() / t, keep, grad=True)
    p = log_p.exp()
    terms = torch.where(keep, p * (log_p - log_q), torch.zeros_like(log_q))
    kl = terms.sum(dim=-1)
    group, _ = _tp()
    if group.size() > 1:
        kl = reduce_from_tensor_model_parallel_region(kl)
    return kl * (t * t)


def distill_loss_func(
    plan: DistillPlan,
    vocab_size: int,
    labels,
    loss_mask,
    teacher_logits,
    output_tensor: torch.Tensor,
    source: torch.Tensor | None = None,
):
    """Megatron-Core's three-value loss: (objective sum, token count, report of distill / kd / lm loss);
    `source` (blended validation rows, [rows, sources] one-hot): each source's objective [sum, count] too."""
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    mask = loss_mask.float()
    n = mask.sum()
    kd_rows = (kd_per_token(output_tensor, teacher_logits, plan, vocab_size) * mask).sum(-1)
    # the lm loss's cross entropy is vocab-parallel too: [s, b, V_local] logits, [s, b] labels
    ce = vocab_parallel_cross_entropy(
        output_tensor.float().transpose(0, 1).contiguous(), labels.t().contiguous()
    )
    lm_rows = (ce.t() * mask).sum(-1)
    rows = kd_rows if plan.skip_lm_loss else lm_rows + plan.kd_loss_scale * kd_rows
    kd, lm, loss = kd_rows.sum(), lm_rows.sum(), rows.sum()

    def pair(total: torch.Tensor) -> torch.Tensor:
        return torch.stack([total.detach().float(), n.detach()])

    report = {"distill loss": pair(loss), "kd loss": pair(kd), "lm loss": pair(lm)}
    if source is not None:
        report[by_source("distill loss")] = source_report(rows, mask.sum(-1), source)
    return loss, n.to(torch.int), report


def distill_forward_step(plan: DistillPlan, vocab_size: int, data_iterator, model):
    """The student's forward step: its logits (no labels: the loss needs the distribution), then the loss."""
    batch = forward_step.get_batch(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"])
    teacher = batch.get("teacher_logits")  # the last stage only, where the loss runs
    return output, partial(
        distill_loss_func,
        plan,
        vocab_size,
        batch["labels"],
        batch["loss_mask"],
        teacher,
        source=batch.get(SOURCE_KEY),
    )


def teacher_forward_step(data_iterator, model):
    batch = forward_step.get_batch(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"])
    return output, partial(_teacher_logits, output)


def _teacher_logits(logits: torch.Tensor, output_tensor: torch.Tensor):
    return frozen_report(output_tensor.detach(), output_tensor)


def _metrics(totals: dict) -> dict[str, float]:
    out = {}
    for key in METRICS:
        if key in totals:
            s, n = totals[key].tolist()
            out[key] = s / max(n, 1.0)
    return out


def teacher_pass(plan) -> FrozenPass:
    """The teacher on the student's layout, its weights streamed from its Hugging Face folder or loaded
    from its bridge checkpoint (resharded); frozen, in eval mode, never saved (no chunk of the trained
    model)."""
    from bridge.conversion.auto_bridge import AutoBridge

    d = plan.distill
    provider = copy.deepcopy(d.teacher)
    if d.teacher_checkpoint is None:
        chunks = frozen_chunks(
            provider, plan, hooks=(AutoBridge.from_hf_pretrained(d.teacher_path).load_hf_weights,)
        )
    else:  # every weight from the checkpoint (strict), loaded at build: no random initialisation first
        load = partial(load_checkpoint, d.teacher_checkpoint, load_rng=False, strict=True)
        chunks = frozen_chunks(provider, plan, hooks=(load,))
    return FrozenPass(chunks, teacher_forward_step, key="teacher_logits", metrics=_metrics)
