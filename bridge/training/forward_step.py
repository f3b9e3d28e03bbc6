"""The default GPT forward step, in Megatron-Core's schedule contract.

`forward_step(data_iterator, model)` returns `(output, partial(loss_func, loss_mask))`; on the last
pipeline stage the schedule calls the partial with the model's per-token losses. `loss_func` returns
Megatron-Core's three-value form (summed loss, token count, {"lm loss": [sum, count]}), so the schedule
normalises by tokens and microbatches and the loop can average the report over data-parallel ranks.

With context parallelism (cp > 1) each rank holds 2 of the sequence's 2*cp chunks (`get_batch`, as
Megatron-Core's `get_batch_on_this_cp_rank` splits it). The schedule divides the returned loss by the
returned token count and Megatron-Core's DDP averages gradients over the dp*cp ranks, so `loss_func`
returns cp x the local loss sum and the CP group's total token count: that average is then the whole
sequence's per-token mean, CP=1's gradient exactly, also when the chunks hold different numbers of loss
tokens (eod_mask_loss). The report stays [local sum, local count] (the loop sums it over dp*cp). With
`calculate_per_token_loss` Megatron-Core normalises by the dp*cp token total itself: nothing changes.

Packed rows (finetuning data with dataset.packed_sequence_size, micro batch 1) carry `cu_seqlens`, the
segment boundaries; they become Megatron-Core's PackedSeqParams in the THD format, so RoPE restarts and
attention stays inside every segment (Transformer Engine's THD attention on GPU, bridge's sdpa attention
on CPU). With cp > 1 every segment is padded to a multiple of 2*cp (the packing) and each CP rank takes
chunks r and 2*cp-1-r of every segment (`split_packed_batch_for_cp`). A vision-language batch keeps its
images whole and, in `whole_tokens`, the whole sequence's tokens: the model merges the images over the whole
sequence and keeps its rank's chunks (bridge.models.vlm_model).
"""

from __future__ import annotations

import inspect
from functools import partial

import torch

from bridge.parallel.wrappers import unwrap
from bridge.training.data.blend import SOURCE_KEY
from bridge.training.data.vlm import IMAGE_KEYS
from bridge.training.source_losses import by_source, source_report

WHOLE_TOKENS = "whole_tokens"  # with cp > 1: the whole sequence's tokens beside the rank's chunks


def get_batch(data_iterator) -> dict[str, torch.Tensor]:
    """Next micro batch, on this rank's device, sliced for context parallelism when cp > 1.

    Every rank reads its batch (the datasets are deterministic functions of the sample index), which
    keeps all per-stage iterators in step; middle pipeline stages simply ignore the tensors.
    """
    from megatron.core import parallel_state

    batch = next(data_iterator)
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    batch.setdefault("attention_mask", None)
    if parallel_state.get_context_parallel_world_size() > 1:
        cp_group = parallel_state.get_context_parallel_group()
        # no sequence dimension to split: the rows' sources and images (patches, grids)
        whole = {k: batch.pop(k) for k in (SOURCE_KEY, *IMAGE_KEYS) if k in batch}
        whole[WHOLE_TOKENS] = batch["tokens"]  # a vision-language model merges images over them
        if "cu_seqlens" in batch:
            batch = split_packed_batch_for_cp(batch, cp_group)
        else:
            batch = split_batch_for_cp(batch, cp_group)
        batch.update(whole)
    return batch


def split_packed_batch_for_cp(batch: dict, cp_group) -> dict:
    """A packed row (micro batch 1): this CP rank's chunks r and 2*cp-1-r of every segment of the [1, t]
    tensors (bridge.models.attention.thd_partition_indices); cu_seqlens stay the row's global
    boundaries, which Megatron-Core's THD RoPE and the attention read with the CP group."""
    from bridge.models.attention import thd_partition_indices

    index = thd_partition_indices(batch["cu_seqlens"].view(-1), cp_group.size(), cp_group.rank())
    out = dict(batch)
    for name in ("tokens", "labels", "loss_mask", "position_ids"):
        out[name] = batch[name].index_select(1, index.to(batch[name].device))
    return out


def split_batch_for_cp(batch: dict, cp_group) -> dict:
    """This CP rank's chunks r and 2*cp-1-r of every [b, s, ...] tensor (attention_mask: its query rows),
    through Megatron-Core's get_batch_on_this_cp_rank. 0.16.1: (batch, cp_group); 0.19.2 added a required
    is_hybrid_cp (False: no cu_seqlens, so its per-sequence zigzag, the same split) and needs cp_group
    (it reads the group's size and rank from torch.distributed, which without it means the world)."""
    from megatron.core.utils import get_batch_on_this_cp_rank

    if "is_hybrid_cp" in inspect.signature(get_batch_on_this_cp_rank).parameters:
        return get_batch_on_this_cp_rank(batch, is_hybrid_cp=False, cp_group=cp_group)
    return get_batch_on_this_cp_rank(batch, cp_group=cp_group)


def loss_func(
    loss_mask: torch.Tensor, output_tensor: torch.Tensor, cp_group=None, source: torch.Tensor | None = None
):
    """Megatron-Core's three-value loss; `cp_group` (cp > 1, per-microbatch mean): see the module doc;
    `source` (blended validation rows, [rows, sources] one-hot): each source's [sum, count] reported too."""
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().to(torch.int)
    reports = {"lm loss": torch.stack([loss.detach(), num_tokens.detach().to(loss.dtype)])}
    if source is not None:
        rows = source.shape[0]
        row_mask = loss_mask.float().reshape(rows, -1)
        row_sums = (output_tensor.float().reshape(rows, -1) * row_mask).sum(-1)
        reports[by_source("lm loss")] = source_report(row_sums, row_mask.sum(-1), source)
    if cp_group is not None and cp_group.size() > 1:
        total_tokens = num_tokens.clone()
        torch.distributed.all_reduce(total_tokens, group=cp_group)
        return loss * cp_group.size(), total_tokens, reports
    return loss, num_tokens, reports


def _cp_group_for_loss(model):
    from megatron.core import parallel_state
    from megatron.core.utils import get_model_config

    if parallel_state.get_context_parallel_world_size() <= 1:
        return None
    if getattr(get_model_config(model), "calculate_per_token_loss", False):
        return None
    return parallel_state.get_context_parallel_group()


def packed_seq_params(cu_seqlens: torch.Tensor):
    """Megatron-Core's THD PackedSeqParams for one packed row's [1, k + 1] (or [k + 1]) boundaries."""
    from megatron.core.packed_seq_params import PackedSeqParams

    cu = cu_seqlens.reshape(-1).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    # the segments are already padded (to 2*cp with CP): the padded boundaries are the same ones
    return PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=cu,
        cu_seqlens_kv=cu,
        cu_seqlens_q_padded=cu,
        cu_seqlens_kv_padded=cu,
        max_seqlen_q=longest,
        max_seqlen_kv=longest,
    )


def forward_step(data_iterator, model):
    batch = get_batch(data_iterator)
    extra = {}
    if "cu_seqlens" in batch:
        extra["packed_seq_params"] = packed_seq_params(batch["cu_seqlens"])
    if getattr(getattr(model, "config", None), "mtp_num_layers", None):
        extra["loss_mask"] = batch["loss_mask"]  # the MTP losses mask the same tokens (shifted per depth)
    images = {k: batch[k] for k in IMAGE_KEYS if k in batch}
    if images:  # image-text rows: the vision-language model merges them on its first stage
        extra["images"] = images
    if WHOLE_TOKENS in batch and getattr(unwrap(model), "merges_whole_sequence", False):
        extra["whole_input_ids"] = batch[WHOLE_TOKENS]  # context parallelism: images merge over all
    output = model(
        batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"], **extra
    )
    return output, partial(
        loss_func, batch["loss_mask"], cp_group=_cp_group_for_loss(model), source=batch.get(SOURCE_KEY)
    )
