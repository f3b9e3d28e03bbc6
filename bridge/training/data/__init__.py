"""Training data: tokenizers, datasets (mock / Megatron indexed / JSONL) and the data-parallel sampler."""
