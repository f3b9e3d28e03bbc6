"""Core attention through torch's scaled_dot_product_attention (sdpa), for the local (non-TE) layer spec.

A drop-in for Megatron-Core's DotProductAttention (same constructor and forward signature, same
[sq, b, np, hn] -> [sq, b, np * hn] layouts, same result): DotProductAttention materialises the
[b, np, sq, sk] scores and masks them in place, which on CPU costs more than the rest of a small
layer; sdpa picks a fused kernel (flash attention on CPU) that never stores the scores.

Supported: self attention with causal, padding (explicit boolean mask) or no mask; GQA; dropout;
softmax_scale and apply_query_key_layer_scaling as DotProductAttention applies them. Not supported
(refused, see `unsupported_reason`): context parallelism, sliding windows, softmax_type other than
"vanilla", packed sequences and attention bias. `bridge.models.specs` keeps DotProductAttention for
those configs.

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
    if config.context_parallel_size != 1:
        return f"model.context_parallel_size={config.context_parallel_size}: sdpa attention runs without CP"
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
    ):
        super().__init__(config=config)
        reason = unsupported_reason(config, layer_number)
        if reason is not None:
            raise ConfigError(
                f"{reason}. Fix: set model.attention_backend=unfused (Megatron-Core's DotProductAttention) "
                "or drop that setting."
            )
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.attention_type = attention_type

        if pg_collection is None:
            pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp"])
        self.pg_collection = pg_collection
        self.tp_group = pg_collection.tp
        tp = self.tp_group.size()
        projection_size = config.kv_channels * config.num_attention_heads
        self.hidden_size_per_partition = divide(projection_size, tp)
        self.hidden_size_per_attention_head = divide(projection_size, config.num_attention_heads)
        self.num_attention_heads_per_partition = divide(config.num_attention_heads, tp)
        self.num_query_groups_per_partition = divide(config.num_query_groups, tp)

        # DotProductAttention divides the scale by layer_number for the QK^T product and multiplies
        # the (fp32) scores back by it before the softmax (apply_query_key_layer_scaling): the
        # probabilities see the undivided scale, which sdpa applies in one go.
        self.softmax_scale = (
            1.0 / math.sqrt(self.hidden_size_per_attention_head) if softmax_scale is None else softmax_scale
        )
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout

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
        """[sq, b, np, hn] query, [sk, b, ng, hn] key/value -> [sq, b, np * hn] context."""
        if packed_seq_params is not None:
            raise NotImplementedError(
                "sdpa attention does not take packed sequences (packed_seq_params); they need Transformer "
                "Engine's attention"
            )
        if attention_bias is not None:
            raise NotImplementedError("sdpa attention does not take an attention bias")
        # Like DotProductAttention, the mask type fixed at construction decides (the argument is unused).
        mask, is_causal = self._sdpa_mask(attention_mask, query.size(0), key.size(0))
        training = self.training and self.dropout_p > 0
        # [s, b, n, d] -> [b, n, s, d] as strided views: sdpa's CPU kernels read them as they are.
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
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
                context = F.scaled_dot_product_attention(q, k, v, **kwargs)
        else:
            context = F.scaled_dot_product_attention(q, k, v, **kwargs)
        # [b, np, sq, hn] -> [sq, b, np * hn]
        return context.permute(2, 0, 1, 3).reshape(
            query.size(0), query.size(1), self.hidden_size_per_partition
        )

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


def _is_default_causal(mask: torch.Tensor, s: int) -> bool:
    # Only a mask shared by every sample and head, shaped [1, 1, s, s] or [s, s], is checked: a
    # per-sample mask would cost an s x s comparison per sample and is rarely the plain causal one.
    if mask.shape[-2:] != (s, s) or mask.numel() != s * s:
        return False
    causal = torch.ones(s, s, dtype=torch.bool, device=mask.device).triu_(1)
    return torch.equal(mask.reshape(s, s), causal)
