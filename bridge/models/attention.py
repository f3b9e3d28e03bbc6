"""Core attention through torch's scaled_dot_product_attention (sdpa), for the local (non-TE) layer spec.

A drop-in for Megatron-Core's DotProductAttention (same constructor and forward signature, same
[sq, b, np, hn] -> [sq, b, np * hn] layouts, same result): DotProductAttention materialises the
[b, np, sq, sk] scores and masks them in place, which on CPU costs more than the rest of a small
layer; sdpa picks a fused kernel (flash attention on CPU) that never stores the scores.

Supported: self attention with causal, padding (explicit boolean mask) or no mask; GQA; multi-latent
attention's head sizes (k_channels for q/k, v_channels for values: sdpa takes a value head size of its
own; Megatron-Core's DotProductAttention takes neither in 0.16.1 nor in 0.19.2); dropout;
softmax_scale and apply_query_key_layer_scaling as DotProductAttention applies them; context
parallelism (below); packed sequences (Megatron-Core's THD format: `packed_seq_params` with
qkv_format="thd" and cu_seqlens; Attention hands over [t, heads, dim] tensors and each token attends
causally within its own segment only; with context parallelism each rank holds chunks r and
2*cp-1-r of every segment, `thd_partition_indices`, and attends to every rank's gathered K/V by
global position within its segment). Not supported (refused, see `unsupported_reason`): sliding
windows, softmax_type other than "vanilla" and attention bias. `bridge.models.specs` keeps
DotProductAttention for those configs (without CP; with CP the model build refuses them).

Context parallelism (context_parallel_size = cp > 1), the local spec's CP path (Transformer Engine's
attention stays the GPU path): each CP rank holds two of the sequence's 2*cp chunks, r and 2*cp-1-r
(Megatron's load-balanced order, as `megatron.core.utils.get_batch_on_this_cp_rank` splits the batch
and RoPE's `get_pos_emb_on_this_cp_rank` the position embeddings). Keys and values are all-gathered
over the CP group (`gather_from_sequence_parallel_region` on that group: forward all-gather, backward
reduce-scatter of the gradients, so every rank's K/V get the gradients of every rank's queries), put
back in global order, and each local query attends to the keys at global positions <= its own (or
through the data path's mask, which `get_batch_on_this_cp_rank` leaves as [b, 1, local sq, global sk]).
Every rank gathers the whole sequence's K/V (memory O(s) per rank, like TE's "all_gather" cp_comm_type).

One difference: a query row whose keys are all masked out gets zeros from sdpa, where
DotProductAttention (masking with -10000) averages every value; such rows carry no loss in GPT
training (padding), so the losses and gradients that matter are the same.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.utils import is_layer_window_attention
from megatron.core.utils import divide

from bridge.errors import ConfigError


def unsupported_reason(config: TransformerConfig, layer_number: int | None = None) -> str | None:
    """Why SDPAttention cannot run this config (a ConfigError-ready 'field=value: rule'), or None."""
    if config.softmax_type != "vanilla":
        return f"model.softmax_type={config.softmax_type!r}: sdpa attention has no softmax offset"
    windowed = config.window_size is not None and (
        layer_number is None
        or is_layer_window_attention(config.window_size, config.window_attn_skip_freq, layer_number)
    )
    if windowed:
        return f"model.window_size={config.window_size!r}: sdpa attention has no sliding window"
    return None


class SDPAttention(MegatronModule):
    """Megatron-Core's DotProductAttention computed with torch.nn.functional.scaled_dot_product_attention."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: ProcessGroupCollection | None = None,
        k_channels: int | None = None,
        v_channels: int | None = None,
    ):
        super().__init__(config=config)
        reason = self.unsupported_reason(config, layer_number)
        if reason is not None:
            raise ConfigError(
                f"{reason}. Fix: set model.attention_backend=unfused (Megatron-Core's DotProductAttention) "
                "or drop that setting."
            )
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.attention_type = attention_type

        if pg_collection is None:
            required = ["tp", "cp"] if config.context_parallel_size > 1 else ["tp"]
            pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=required)
        self.pg_collection = pg_collection
        self.tp_group = pg_collection.tp
        # Context parallelism: this rank's CP group (None without CP).
        self.cp_group = None
        if config.context_parallel_size > 1:
            self.cp_group = getattr(pg_collection, "cp", None)
            if self.cp_group is None:
                from megatron.core import parallel_state

                self.cp_group = parallel_state.get_context_parallel_group()
            if self.cp_group.size() != config.context_parallel_size:
                raise ValueError(
                    f"context_parallel_size={config.context_parallel_size} but the CP group has "
                    f"{self.cp_group.size()} ranks"
                )
            if attention_type != "self":
                raise NotImplementedError("sdpa attention with context parallelism is self attention only")
        self._cp_masks: dict = {}
        tp = self.tp_group.size()
        # Multi-latent attention passes its head sizes: q/k heads of k_channels (nope + rope dims), value
        # heads of v_channels; sdpa takes a value dimension of its own, the output has v_channels per head.
        k_channels = config.kv_channels if k_channels is None else k_channels
        v_channels = config.kv_channels if v_channels is None else v_channels
        self.hidden_size_per_partition = divide(v_channels * config.num_attention_heads, tp)
        self.hidden_size_per_attention_head = k_channels
        self.num_attention_heads_per_partition = divide(config.num_attention_heads, tp)
        self.num_query_groups_per_partition = divide(config.num_query_groups, tp)

        # DotProductAttention divides the scale by layer_number for the QK^T product and multiplies
        # the (fp32) scores back by it before the softmax (apply_query_key_layer_scaling): the
        # probabilities see the undivided scale, which sdpa applies in one go.
        self.softmax_scale = (
            1.0 / math.sqrt(self.hidden_size_per_attention_head) if softmax_scale is None else softmax_scale
        )
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout
        # QK-clip (model.qk_clip) and its logging read each head's largest attention logit since the last
        # optimizer step, as Transformer Engine's attention records it: the attribute Megatron-Core's
        # clip_qk() reads and resets (bridge.training.qk_clip).
        self.record_max_logits = bool(config.qk_clip or config.log_max_attention_logit)
        self.current_max_attn_logits: torch.Tensor | None = None

    @staticmethod
    def unsupported_reason(config: TransformerConfig, layer_number: int | None = None) -> str | None:
        """What this class cannot run (subclasses that run more override it)."""
        return unsupported_reason(config, layer_number)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params=None,
    ) -> torch.Tensor:
        """[sq, b, np, hn] query, [sk, b, ng, hn] key/value -> [sq, b, np * hn] context
        (packed THD: [t, np, hn] and [t, ng, hn] -> [t, np * hn])."""
        if attention_bias is not None:
            raise NotImplementedError("sdpa attention does not take an attention bias")
        if packed_seq_params is not None:
            return self._packed_forward(query, key, value, packed_seq_params)
        if self.cp_group is not None:
            # This rank's 2 chunks of K/V -> the whole sequence's, in global order; mask by global position.
            key = gather_cp_sequence(key, self.cp_group)
            value = gather_cp_sequence(value, self.cp_group)
            mask, is_causal = self._cp_mask(attention_mask, query.size(0), key.size(0), query.device)
        else:
            # Like DotProductAttention, the mask type fixed at construction decides (the argument is unused).
            mask, is_causal = self._sdpa_mask(attention_mask, query.size(0), key.size(0))
        # [s, b, n, d] -> [b, n, s, d] as strided views: sdpa's CPU kernels read them as they are.
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        context = self._sdpa(q, k, v, mask, is_causal)
        # [b, np, sq, hn] -> [sq, b, np * hn]
        # (the value's head size: MLA's v_head_dim, or 0.19.2's THD padding of it, which MLA trims)
        return context.permute(2, 0, 1, 3).reshape(query.size(0), query.size(1), -1)

    def _sdpa(self, q, k, v, mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        """sdpa on [b, n, s, d] views, with dropout from the right RNG."""
        if self.record_max_logits:
            self._record_max_logits(q, k, mask, is_causal)
        training = self.training and self.dropout_p > 0
        gqa = self.num_attention_heads_per_partition != self.num_query_groups_per_partition
        kwargs = dict(
            attn_mask=mask,
            dropout_p=self.dropout_p if training else 0.0,
            is_causal=is_causal,
            scale=self.softmax_scale,
            enable_gqa=gqa,
        )
        if training and not self.config.sequence_parallel:
            # Dropout draws from the model-parallel RNG, as DotProductAttention's does: each TP rank
            # holds different heads and must drop independently.
            with tensor_parallel.get_cuda_rng_tracker().fork():
                return F.scaled_dot_product_attention(q, k, v, **kwargs)
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    @torch.no_grad()
    def _record_max_logits(self, q, k, mask: torch.Tensor | None, is_causal: bool) -> None:
        """Each local head's max of softmax_scale * q.k over the positions it attends to (sdpa never
        forms the scores: they are computed again here, [b, n, sq, sk] in fp32), kept as the running max
        over the micro batches since clip_qk() last reset it."""
        n = self.num_attention_heads_per_partition
        if k.size(1) != n:  # GQA: each key head serves n / groups query heads
            k = k.repeat_interleave(n // k.size(1), dim=1)
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.softmax_scale
        if is_causal:
            sq, sk = scores.shape[-2:]
            mask = torch.ones(sq, sk, dtype=torch.bool, device=scores.device).tril()  # sdpa's is_causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        batch_max = scores.transpose(0, 1).reshape(n, -1).amax(dim=1)
        current = self.current_max_attn_logits
        self.current_max_attn_logits = batch_max if current is None else torch.maximum(current, batch_max)

    def _packed_forward(self, query, key, value, packed_seq_params) -> torch.Tensor:
        """THD: [t, np, hn] q, [t, ng, hn] k/v of one packed row; causal attention inside each segment."""
        if packed_seq_params.qkv_format != "thd":
            raise NotImplementedError(
                f"sdpa attention takes packed sequences in the thd format, got {packed_seq_params.qkv_format!r}"
            )
        if query.dim() != 3:
            raise ValueError(
                f"packed (thd) attention expects [t, heads, dim] tensors, got {tuple(query.shape)}"
            )
        if self.cp_group is not None:
            # This rank holds chunks r and 2*cp-1-r of every segment (thd_partition_indices); gather every
            # rank's K/V (rank-major) and mask by global position and segment.
            key = gather_cp_tokens(key, self.cp_group)
            value = gather_cp_tokens(value, self.cp_group)
            mask = self._packed_cp_mask(packed_seq_params.cu_seqlens_q, query.size(0), query.device)
        else:
            mask = packed_causal_mask(packed_seq_params.cu_seqlens_q, query.size(0), query.device)
        q, k, v = (t.permute(1, 0, 2).unsqueeze(0) for t in (query, key, value))  # [1, n, t, d]
        context = self._sdpa(q, k, v, mask, False)
        return context.squeeze(0).permute(1, 0, 2).reshape(query.size(0), -1)

    def _packed_cp_mask(self, cu_seqlens: torch.Tensor, local: int, device) -> torch.Tensor:
        """[local t, cp * local t] (True = attend): this rank's packed tokens against every rank's, causal
        within a segment by global position (`cu_seqlens` are the row's global, padded boundaries)."""
        cp, rank = self.cp_group.size(), self.cp_group.rank()
        cu = cu_seqlens.to(device=device, dtype=torch.int64).view(-1)
        if int(cu[-1]) != local * cp:
            raise ValueError(
                f"context parallelism: {local} local packed tokens need a row of {local * cp}, got {cu.tolist()}"
            )
        key = ("thd", tuple(cu.tolist()), rank, cp, str(device))
        mask = self._cp_masks.get(key)
        if mask is None:
            k_pos = torch.cat([thd_partition_indices(cu, cp, r) for r in range(cp)])
            q_pos = thd_partition_indices(cu, cp, rank)
            full = packed_causal_mask(cu, local * cp, device)  # [t, t] in global order
            mask = full[q_pos][:, k_pos]
            self._cp_masks = {key: mask}
        return mask

    def _sdpa_mask(
        self, attention_mask: torch.Tensor | None, sq: int, sk: int
    ) -> tuple[torch.Tensor | None, bool]:
        """(attn_mask for sdpa with True = attend, is_causal) from Megatron's mask (True = masked out)."""
        if attention_mask is None:
            if self.attn_mask_type != AttnMaskType.causal or sq == 1:
                # No mask; sq == 1 is one decoding step, which may see every cached key.
                return None, False
            if sq != sk:
                raise ValueError(f"causal attention without a mask needs sq == sk, got sq={sq}, sk={sk}")
            return None, True
        if attention_mask.dtype != torch.bool:
            raise TypeError(f"attention_mask must be boolean (True = masked out), got {attention_mask.dtype}")
        if sq == sk and _is_default_causal(attention_mask, sq):
            # The plain causal mask (what GPTModel's data path usually sends): the kernel's own causal path.
            return None, True
        return ~attention_mask, False

    def _cp_mask(
        self, attention_mask: torch.Tensor | None, sq: int, sk: int, device
    ) -> tuple[torch.Tensor | None, bool]:
        """sdpa's attn_mask (True = attend) for this CP rank's queries against the gathered global keys."""
        cp, rank = self.cp_group.size(), self.cp_group.rank()
        if sk != sq * cp:
            raise ValueError(
                f"context parallelism: {sq} local queries need {sq * cp} gathered keys, got {sk}"
            )
        if attention_mask is not None:
            if attention_mask.dtype != torch.bool:
                raise TypeError(
                    f"attention_mask must be boolean (True = masked out), got {attention_mask.dtype}"
                )
            if attention_mask.shape[-2:] != (sq, sk):
                raise ValueError(
                    "context parallelism: attention_mask must be [..., local sq, global sk] = "
                    f"[..., {sq}, {sk}] (as get_batch_on_this_cp_rank slices it), got {tuple(attention_mask.shape)}"
                )
            return ~attention_mask, False
        if self.attn_mask_type != AttnMaskType.causal:
            return None, False
        key = (sq, sk, rank, cp, str(device))
        mask = self._cp_masks.get(key)
        if mask is None:
            q_pos = cp_local_positions(sq * cp, cp, rank, device=device)
            mask = torch.arange(sk, device=device)[None, :] <= q_pos[:, None]  # [sq, sk], True = attend
            self._cp_masks = {key: mask}
        return mask, False


def packed_causal_mask(cu_seqlens: torch.Tensor, total: int, device) -> torch.Tensor:
    """[t, t] boolean mask (True = attend) of a packed row: causal, and only within a token's segment
    (segments are [cu_seqlens[i], cu_seqlens[i+1]))."""
    cu = cu_seqlens.to(device=device, dtype=torch.int64).view(-1)
    if int(cu[0]) != 0 or int(cu[-1]) != total or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"cu_seqlens must rise from 0 to the row's {total} tokens, got {cu.tolist()}")
    segment = torch.repeat_interleave(torch.arange(cu.numel() - 1, device=device), cu[1:] - cu[:-1])
    position = torch.arange(total, device=device)
    return (segment[:, None] == segment[None, :]) & (position[None, :] <= position[:, None])


def cp_chunk_ranks(cp: int) -> list[tuple[int, int]]:
    """Where each of the sequence's 2*cp chunks lives: chunk j -> (CP rank, 0 or 1 = first or second half)."""
    return [(j, 0) if j < cp else (2 * cp - 1 - j, 1) for j in range(2 * cp)]


def cp_local_positions(seq_length: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """Global positions of CP rank `rank`'s tokens: chunks rank and 2*cp-1-rank of the sequence."""
    chunk = seq_length // (2 * cp)
    return torch.cat(
        [
            torch.arange(rank * chunk, (rank + 1) * chunk, device=device),
            torch.arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk, device=device),
        ]
    )


def thd_partition_indices(cu_seqlens: torch.Tensor, cp: int, rank: int) -> torch.Tensor:
    """Positions in a packed row of CP rank `rank`'s tokens: chunks rank and 2*cp-1-rank of every segment
    (each segment's length a multiple of 2*cp), segment after segment; what Transformer Engine's
    thd_get_partitioned_indices gives, so the same split serves TE's THD attention on GPU."""
    cu = cu_seqlens.to(torch.int64).view(-1).tolist()
    parts = []
    for start, end in zip(cu[:-1], cu[1:], strict=True):
        length = end - start
        if length % (2 * cp):
            raise ValueError(
                f"a packed segment of {length} tokens does not split into 2*cp = {2 * cp} chunks"
            )
        parts.append(start + cp_local_positions(length, cp, rank, device=cu_seqlens.device))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=cu_seqlens.device)


def gather_cp_tokens(x: torch.Tensor, cp_group) -> torch.Tensor:
    """[local t, ...] on each CP rank -> [cp * local t, ...] rank-major (rank 0's tokens, then rank 1's ...),
    autograd-correct (all-gather forward, reduce-scatter of the gradients backward)."""
    return tensor_parallel.gather_from_sequence_parallel_region(
        x.contiguous(), tensor_parallel_output_grad=True, group=cp_group
    )


def gather_cp_sequence(x: torch.Tensor, cp_group) -> torch.Tensor:
    """[local s, ...] on each CP rank -> [cp * local s, ...] in global sequence order, autograd-correct.

    The all-gather is Megatron-Core's `gather_from_sequence_parallel_region` on the CP group (its
    backward is a reduce-scatter: each rank gets the sum of every rank's gradient for its own chunks);
    the gathered rank-major [rank 0: chunks 0, 2cp-1 | rank 1: chunks 1, 2cp-2 | ...] is then reordered.
    """
    cp = cp_group.size()
    gathered = tensor_parallel.gather_from_sequence_parallel_region(
        x.contiguous(), tensor_parallel_output_grad=True, group=cp_group
    )
    chunks = gathered.view(2 * cp, x.size(0) // 2, *x.shape[1:])
    order = torch.tensor([2 * r + half for r, half in cp_chunk_ranks(cp)], device=x.device)
    return chunks.index_select(0, order).view(cp * x.size(0), *x.shape[1:])


def _is_default_causal(mask: torch.Tensor, s: int) -> bool:
    # Only a mask shared by every sample and head, shaped [1, 1, s, s] or [s, s], is checked: a
    # per-sample mask would cost an s x s comparison per sample and is rarely the plain causal one.
    if mask.shape[-2:] != (s, s) or mask.numel() != s * s:
        return False
    causal = torch.ones(s, s, dtype=torch.bool, device=mask.device).triu_(1)
    return torch.equal(mask.reshape(s, s), causal)
