"""The default GPT forward step, in Megatron-Core's schedule contract.

`forward_step(data_iterator, model)` returns `(output, partial(loss_func, loss_mask))`; on the last
pipeline stage the schedule calls the partial with the model's per-token losses. `loss_func` returns
Megatron-Core's three-value form (summed loss, token count, {"lm loss": [sum, count]}), so the schedule
normalises by tokens and microbatches and the loop can average the report over data-parallel ranks.
"""

from __future__ import annotations

from functools import partial

import torch


def get_batch(data_iterator) -> dict[str, torch.Tensor]:
    """Next micro batch, on this rank's device, sliced for context parallelism when cp > 1.

    Every rank reads its batch (the datasets are deterministic functions of the sample index), which
    keeps all per-stage iterators in step; middle pipeline stages simply ignore the tensors.
    """
    from megatron.core import parallel_state
    from megatron.core.utils import get_batch_on_this_cp_rank

    batch = next(data_iterator)
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    batch.setdefault("attention_mask", None)
    if parallel_state.get_context_parallel_world_size() > 1:
        batch = get_batch_on_this_cp_rank(batch)
    return batch


def loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().to(torch.int)
    report = torch.stack([loss.detach(), num_tokens.detach().to(loss.dtype)])
    return loss, num_tokens, {"lm loss": report}


def forward_step(data_iterator, model):
    batch = get_batch(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])
