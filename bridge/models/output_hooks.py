"""Model-level variants GPTModel does not have, as forward hooks on its built modules:
embeddings scaled by sqrt(hidden_size) (Gemma) and final logit soft-capping (Gemma 2)."""

from __future__ import annotations

import torch


def apply_output_hooks(model, provider) -> None:
    """Hook `model` (one GPTModel stage) as `provider` asks; stages without the module skip it."""
    embedding = getattr(model, "embedding", None)
    if provider.scale_embeddings_by_sqrt_hidden and embedding is not None:
        # transformers keeps sqrt(hidden) as an fp32 tensor cast to the embedding's dtype: the same here.
        scale = torch.tensor(provider.hidden_size**0.5, dtype=torch.float32)

        def scale_embeddings(module, args, output):
            return output * scale.to(device=output.device, dtype=output.dtype)

        embedding.register_forward_hook(scale_embeddings)
    output_layer = getattr(model, "output_layer", None)
    cap = provider.final_logit_softcapping
    if cap is not None and output_layer is not None:

        def softcap_logits(module, args, output):
            logits, bias = output  # vocab-parallel shards: the cap is elementwise
            return torch.tanh(logits / cap) * cap, bias

        output_layer.register_forward_hook(softcap_logits)
