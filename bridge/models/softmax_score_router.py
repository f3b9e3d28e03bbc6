"""A top-k router whose scores are the softmax probabilities over the experts, with Megatron-Core's
expert bias added to them for the choice only.

Megatron-Core's routers (0.16.1, 0.19.2) add `expert_bias` only to sigmoid scores: its sigmoid router
chooses by top-k of sigmoid(logits) + expert_bias and weights the chosen sigmoid scores, renormalised
(k > 1). This router hands that sigmoid router logit(softmax(logits)) instead of the logits, so that its
sigmoid scores are the softmax probabilities: experts chosen by probability + bias, weighted by the
chosen probabilities renormalised (ERNIE 4.5's routing). Everything else (dispatch, auxiliary losses
computed on the same scores, the bias update) is Megatron-Core's.
"""

from __future__ import annotations

import torch
from megatron.core.transformer.moe.router import TopKRouter


def softmax_as_sigmoid_logits(logits: torch.Tensor) -> torch.Tensor:
    """logit(softmax(logits)) in fp32: log p - log(1 - p), whose sigmoid is p."""
    log_p = torch.log_softmax(logits.float(), dim=-1)
    return (log_p - torch.log1p(-log_p.exp())).type_as(logits)


class SoftmaxScoreRouter(TopKRouter):
    """TopKRouter (score function sigmoid) whose scores are softmax probabilities."""

    def gating(self, input: torch.Tensor) -> torch.Tensor:
        return softmax_as_sigmoid_logits(super().gating(input))
