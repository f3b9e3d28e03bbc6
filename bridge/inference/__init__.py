"""Text generation on bridge's Megatron-Core GPTModel chunks (any TP / PP layout).

`generate(chunks, prompt_ids, 32, vocab_size=provider.vocab_size)` -> GenerationResult(ids, tokens_per_s),
greedy by default; bridge/inference/generate.py describes the steps, the KV cache and the sampling.
"""

from bridge.inference.generate import (
    GenerationResult,
    filter_logits,
    generate,
    sample_token,
    top_k_mask,
    top_p_mask,
)

__all__ = ["GenerationResult", "filter_logits", "generate", "sample_token", "top_k_mask", "top_p_mask"]
