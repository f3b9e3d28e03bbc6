"""Model-level variants GPTModel does not have, as forward hooks on its built modules:
embeddings scaled by sqrt(hidden_size) (Gemma), constant multipliers of the embeddings, the branch
outputs and the logits (Granite), final logit soft-capping (Gemma 2), and the padded
vocabulary rows kept out of the softmax (Megatron-Core's cross entropy would otherwise count them)."""

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
    if provider.embedding_multiplier is not None and embedding is not None:
        embedding.register_forward_hook(_times(provider.embedding_multiplier))
    if provider.branch_output_multiplier is not None:
        _scale_branch_outputs(model, provider.branch_output_multiplier)
    output_layer = getattr(model, "output_layer", None)
    divisor = provider.logits_divisor
    if divisor is not None and output_layer is not None:

        def divide_logits(module, args, output):
            logits, bias = output  # vocab-parallel shards: elementwise
            return logits / divisor, bias

        output_layer.register_forward_hook(divide_logits)
    cap = provider.final_logit_softcapping
    if cap is not None and output_layer is not None:

        def softcap_logits(module, args, output):
            logits, bias = output  # vocab-parallel shards: the cap is elementwise
            return torch.tanh(logits / cap) * cap, bias

        output_layer.register_forward_hook(softcap_logits)
    padded = provider.padded_vocab_size()
    if padded > provider.vocab_size and output_layer is not None:
        output_layer.register_forward_hook(_padded_logits_mask(provider.vocab_size, padded))


def _times(multiplier: float):
    """A hook multiplying a module's output by a Python float (as transformers does: `x * m`)."""

    def multiply(module, args, output):
        return output * multiplier

    return multiply


def _scale_branch_outputs(model, multiplier: float) -> None:
    """Each layer's attention and MLP output (and its bias, when returned apart) times `multiplier`,
    before the residual add; on the whole branch module, so adapters inside it (LoRA) are scaled too."""

    def scale(module, args, output):
        out, bias = output
        return out * multiplier, (None if bias is None else bias * multiplier)

    decoder = getattr(model, "decoder", None)
    for layer in getattr(decoder, "layers", ()):
        layer.self_attention.register_forward_hook(scale)
        layer.mlp.register_forward_hook(scale)


def _padded_logits_mask(vocab_size: int, padded_vocab_size: int):
    """A hook setting the logits of rows >= vocab_size to the dtype's lowest finite value: its exp after
    the softmax's max subtraction is exactly 0, so the padding takes no share of the softmax (loss and
    gradients equal an unpadded model's) and is never sampled, while the logits stay finite."""

    def mask_padded_logits(module, args, output):
        logits, bias = output
        local = logits.shape[-1]
        if local == padded_vocab_size:  # gathered (inference), or tensor-parallel size 1
            start = 0
        else:  # this rank's vocab-parallel shard
            from megatron.core import parallel_state

            start = parallel_state.get_tensor_model_parallel_rank() * local
        first_padded = max(0, vocab_size - start)
        if first_padded >= local:
            return output
        columns = torch.arange(local, device=logits.device) >= first_padded
        return logits.masked_fill(columns, torch.finfo(logits.dtype).min), bias

    return mask_padded_logits
