"""Model FLOPs per trained token, for the TFLOP/s estimate in the log line.

Counts matrix multiplies only (2 FLOPs per multiply-add), forward + backward = 3 x forward, causal
attention scores at half the square. Embedding lookups, norms and activations are ignored.
"""

from __future__ import annotations

from typing import Any


def training_flops_per_token(model_cfg: Any, seq_length: int) -> float:
    h = model_cfg.hidden_size
    heads = model_cfg.num_attention_heads
    groups = getattr(model_cfg, "num_query_groups", None) or heads
    d = getattr(model_cfg, "kv_channels", None) or h // heads
    ffn = getattr(model_cfg, "ffn_hidden_size", None) or 4 * h
    gated = 3 if getattr(model_cfg, "gated_linear_unit", False) else 2
    experts = getattr(model_cfg, "num_moe_experts", None) or 0
    if experts:
        topk = getattr(model_cfg, "moe_router_topk", 2)
        moe_ffn = getattr(model_cfg, "moe_ffn_hidden_size", None) or ffn
        shared = getattr(model_cfg, "moe_shared_expert_intermediate_size", None) or 0
        mlp = gated * h * (topk * moe_ffn + shared) + h * experts
    else:
        mlp = gated * h * ffn
    attn_proj = h * heads * d + 2 * h * groups * d + heads * d * h
    attn_scores = seq_length * heads * d  # QK^T and AV, each s*heads*d MACs, halved for causal
    per_layer = attn_proj + mlp + attn_scores
    vocab = model_cfg.vocab_size
    forward_macs = model_cfg.num_layers * per_layer + h * vocab
    return 3 * 2 * float(forward_macs)
