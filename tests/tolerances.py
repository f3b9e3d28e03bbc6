"""How far apart two fp32 computations of the same model may be, from the computation itself.

bridge and transformers (or peft) compute the same function with different kernels: fused QKV against
separate projections, another summation order, another CPU kernel family (AVX-512, AVX2, the default).
Each reduction of length n rounds with an error below lambda * sqrt(n) * u * (the magnitude of its terms),
u = 2^-24 the unit roundoff of fp32, with probability at least 1 - 2 exp(-lambda^2 / 2) (Higham and Mary's
probabilistic bound, 2019); lambda = 6 makes that 3e-8 per value, so that no value of a test's
thousands misses it. A decoder layer puts REDUCTIONS_PER_LAYER such reductions on the residual stream
(the attention projections, the attention's scores and weighted sum, the MLP's two projections), each
feeding the next, and the output layer one more, over the hidden size; the norms keep the activations at
magnitude 1, and the logits are compared at their own magnitude. So two correct implementations differ by
at most

    lambda * u * sqrt(n_max) * (REDUCTIONS_PER_LAYER * layers + 1) * max(1, max |logits|)

where n_max is the longest reduction (the hidden or the MLP's inner size). A wrong mapping, a missing bias
or a transposed weight moves the logits by 1e-2 or more on the tiny test models, orders above it.
"""

from __future__ import annotations

import math

import torch

UNIT_ROUNDOFF = 2.0**-24  # fp32
LAMBDA = 6.0
REDUCTIONS_PER_LAYER = 4


def _get(config, name: str, default=None):
    value = config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)
    return default if value is None else value


def logits_tolerance(reference: torch.Tensor, config) -> float:
    """The largest |logits - reference| two correct fp32 implementations of the model `config` describes
    (a transformers config or its dict) can show, per the module's derivation."""
    text = _get(config, "text_config", config)  # a multimodal config's language model
    layers = int(_get(text, "num_hidden_layers", 1))
    hidden = int(_get(text, "hidden_size"))
    inner = max(int(_get(text, "intermediate_size", hidden)), int(_get(text, "moe_intermediate_size", 0)))
    magnitude = max(1.0, reference.abs().max().item())
    return (
        LAMBDA
        * UNIT_ROUNDOFF
        * math.sqrt(max(hidden, inner))
        * (REDUCTIONS_PER_LAYER * layers + 1)
        * magnitude
    )


def merged_weight_tolerance(reference: torch.Tensor, rank: int) -> float:
    """|W + s * B @ A| computed twice: one product of inner length `rank` and one addition, at the merged
    weight's magnitude."""
    return LAMBDA * UNIT_ROUNDOFF * (math.sqrt(rank) + 1) * max(1.0, reference.abs().max().item())
