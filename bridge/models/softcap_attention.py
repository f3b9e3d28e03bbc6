"""Core attention with attention-logit soft-capping and per-layer sliding windows (Gemma 2), for the
local spec: scores = tanh(q k^T * scale / cap) * cap, then the causal / sliding-window / padding mask,
then a float32 softmax, as transformers' eager Gemma 2 attention computes them.

torch's sdpa cannot soft-cap, so this is an explicit masked matmul-softmax (it materialises the
[b, heads, sq, sk] scores, like Megatron-Core's DotProductAttention). The window is Megatron-Core's
window_size = (left, right) on the layers `is_layer_window_attention(window_size,
window_attn_skip_freq, layer_number)` selects: a query at position q sees keys q - left .. q + right
(right 0: causal). With an explicit mask (a vision-language model's: Gemma 3's image tokens see the
later tokens of their image) the mask decides which later keys a query sees and the window adds its left
bound only, as transformers' sliding_window_overlay (its only bound) on top of the mask. Refused: context parallelism (the model build refuses it first), packed
sequences, attention bias.
"""

from __future__ import annotations

import torch
from megatron.core import tensor_parallel
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.utils import is_layer_window_attention

from bridge.errors import ConfigError
from bridge.models.attention import SDPAttention


class SoftcapAttention(SDPAttention):
    """SDPAttention's interface; explicit attention with optional soft-capping and a per-layer window."""

    def __init__(
        self,
        *args,
        logit_softcapping: float | None = None,
        rope_score_multiplier: float | None = None,
        local_rope: bool = False,
        query_position_scale: tuple[float, int] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if self.cp_group is not None:
            raise ConfigError(
                f"model.context_parallel_size={self.config.context_parallel_size}: soft-capped attention "
                "has no context-parallel path. Fix: set model.context_parallel_size=1."
            )
        self.logit_softcapping = logit_softcapping
        self.query_position_scale = query_position_scale
        window = self.config.window_size
        windowed = is_layer_window_attention(window, self.config.window_attn_skip_freq, self.layer_number)
        self.window = tuple(window) if windowed else None
        # the multiplier is for the layers rotating with GPTModel's RoPE: not the windowed layers of a
        # model whose windowed layers have their own (local_rope)
        uses_model_rope = not (local_rope and windowed)
        self.score_scale = self.softmax_scale * (
            rope_score_multiplier if rope_score_multiplier is not None and uses_model_rope else 1.0
        )

    @staticmethod
    def unsupported_reason(config, layer_number=None) -> str | None:
        if config.softmax_type != "vanilla":
            return f"model.softmax_type={config.softmax_type!r}: soft-capped attention has no softmax offset"
        return None

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
        if attention_bias is not None:
            raise NotImplementedError("soft-capped attention does not take an attention bias")
        if packed_seq_params is not None:
            raise NotImplementedError("soft-capped attention does not take packed sequences")
        sq, sk = query.size(0), key.size(0)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, n, s, d]
        repeat = self.num_attention_heads_per_partition // self.num_query_groups_per_partition
        if repeat > 1:
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.score_scale
        if self.query_position_scale is not None:
            # Llama 4's query scale by position (queries are the last sq of sk positions), applied to the
            # query's scores: q * c . k = c * (q . k)
            beta, original = self.query_position_scale
            q_pos = torch.arange(sk - sq, sk, device=scores.device, dtype=torch.float32)
            factor = 1 + beta * torch.log1p(torch.floor(q_pos / original))
            scores = scores * factor.to(scores.dtype)[:, None]
        if self.logit_softcapping is not None:
            cap = self.logit_softcapping
            scores = torch.tanh(scores / cap) * cap
        attend = self._attend(attention_mask, sq, sk, query.device)
        if attend is not None:
            scores = scores.masked_fill(~attend, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        if self.training and self.dropout_p > 0:
            if self.config.sequence_parallel:
                probs = torch.nn.functional.dropout(probs, self.dropout_p)
            else:  # each TP rank holds other heads: the model-parallel RNG, as DotProductAttention
                with tensor_parallel.get_cuda_rng_tracker().fork():
                    probs = torch.nn.functional.dropout(probs, self.dropout_p)
        context = torch.matmul(probs, v)  # [b, np, sq, hn]
        return context.permute(2, 0, 1, 3).reshape(sq, query.size(1), self.hidden_size_per_partition)

    def _attend(self, attention_mask, sq: int, sk: int, device) -> torch.Tensor | None:
        """Boolean [.., sq, sk] (True = attend): Megatron's mask (True = masked out), or causal by the
        construction-time mask type, and the layer's window (its left bound only under an explicit
        mask). Queries are the last sq of sk positions (sq < sk: decoding with cached keys)."""
        q_pos = torch.arange(sk - sq, sk, device=device)[:, None]
        k_pos = torch.arange(sk, device=device)[None, :]
        if attention_mask is not None:
            if attention_mask.dtype != torch.bool:
                raise TypeError(
                    f"attention_mask must be boolean (True = masked out), got {attention_mask.dtype}"
                )
            attend = ~attention_mask
        elif self.attn_mask_type == AttnMaskType.causal:
            attend = k_pos <= q_pos
        else:
            attend = None
        if self.window is not None:
            left, right = self.window  # -1: unbounded on that side
            band = torch.ones(sq, sk, dtype=torch.bool, device=device)
            if left >= 0:
                band = band & (k_pos >= q_pos - left)
            if right >= 0 and attention_mask is None:
                band = band & (k_pos <= q_pos + right)
            attend = band if attend is None else attend & band
        return attend
