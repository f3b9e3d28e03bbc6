"""QK-clip after each optimizer step (model.qk_clip, MuonClip as Kimi K2 trains with Muon), and the max
attention logit it logs (also alone, with model.log_max_attention_logit).

Megatron-Core's clip_qk (megatron.core.optimizer.qk_clip) walks `chunk.module.module.decoder`, one fixed
wrapping; this is the same walk over bridge's chunks whatever wraps them. Each attention layer's core
attention has recorded every local head's largest logit since the last step (Transformer Engine's
attention, or bridge's sdpa attention on the local spec: bridge.models.attention); the maxima are
all-reduced over the data-parallel (with context-parallel) group, as Megatron-Core does, and the
layer's own clip_qk() (Megatron-Core's SelfAttention / MLASelfAttention) scales W_q and W_k of the heads
over model.qk_clip_threshold tau by eta = tau / max logit: W_q by eta^alpha, W_k by eta^(1 - alpha)
(alpha = model.qk_clip_alpha, 0.5 in Kimi K2's rule: sqrt(eta) each); with multi-latent attention the
decoupled rotary query part by eta and the shared rotary key not at all.
"""

from __future__ import annotations

import torch

from bridge.parallel.wrappers import unwrap


def clip_qk(model_chunks: list, clip: bool) -> float:
    """Clip (when `clip`) and reset every layer's recorded max logits; return the largest logit of the
    whole model (all ranks)."""
    from megatron.core import parallel_state

    largest = torch.tensor(float("-inf"))
    dp_cp = parallel_state.get_data_parallel_group(with_context_parallel=True)
    for chunk in model_chunks:
        for layer in unwrap(chunk).decoder.layers:
            attention = getattr(layer, "self_attention", None)
            if attention is None or not hasattr(attention, "clip_qk"):
                continue
            core = attention.core_attention
            logits = getattr(core, "current_max_attn_logits", None)
            if logits is None:
                raise RuntimeError(
                    f"model.qk_clip: layer {layer.layer_number}'s core attention ({type(core).__name__}) "
                    "recorded no max attention logits in this step: only Transformer Engine's attention "
                    "and bridge's sdpa attention record them"
                )
            torch.distributed.all_reduce(logits, op=torch.distributed.ReduceOp.MAX, group=dp_cp)
            largest = torch.maximum(largest, logits.max().float().cpu())
            if clip:
                attention.clip_qk()  # resets current_max_attn_logits
            else:
                core.current_max_attn_logits = None
    # the other pipeline stages' and tensor-parallel ranks' layers and heads
    device = "cuda" if torch.cuda.is_available() else "cpu"
    largest = largest.to(device)
    torch.distributed.all_reduce(largest, op=torch.distributed.ReduceOp.MAX)
    return float(largest.item())
