"""Helpers for the training workers: a tiny Llama config on the llama32_1b recipe, learnable data."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bridge.config.run_plan import build_plan

TINY_MODEL = [
    "model.num_layers=4",
    "model.hidden_size=64",
    "model.ffn_hidden_size=128",
    "model.num_attention_heads=4",
    "model.num_query_groups=2",
    "model.seq_length=32",
    "model.vocab_size=256",
]
# TINY_MODEL's layers with multi-latent attention (query compression) instead of grouped-query attention
MLA_TINY = ["model.multi_latent_attention=true", "model.q_lora_rank=24", "model.kv_lora_rank=32",
            "model.qk_head_dim=16", "model.qk_pos_emb_head_dim=8", "model.v_head_dim=12", "model.qk_layernorm=true",
            "model.rope_type=rope", "model.rope_scaling=false"]  # fmt: skip
SHORT_RUN = [
    "train.global_batch_size=8",
    "train.micro_batch_size=1",
    "scheduler.lr_warmup_iters=1",
    "validation.eval_iters=0",
    "validation.eval_interval=0",
    "checkpoint.save=null",
    "checkpoint.save_interval=0",
    "logger.log_interval=1",
    "logger.tensorboard_dir=null",
    "dataset.num_workers=0",
]


def tiny_config(*overrides: str):
    from bridge.config.overrides import apply_overrides
    from recipes.llama import llama32_1b_pretrain_config

    return apply_overrides(llama32_1b_pretrain_config(), [*TINY_MODEL, *SHORT_RUN, *overrides])


def run_model_chunks(cfg, world_size: int) -> list:
    """The model chunks `cfg`'s run builds on this machine (its plan's provider: GPU-only performance
    settings off on CPU), planned without the checkpoint start it names (the callers write that one)."""
    import torch

    from bridge.config.overrides import apply_overrides

    plan = build_plan(
        apply_overrides(cfg.copy(), ["checkpoint.pretrained_checkpoint=null"]),
        world_size,
        cuda=torch.cuda.is_available(),
    )
    return plan.provider.provide_distributed_model(wrap_with_ddp=False)


def write_learnable_indexed_data(prefix: str | Path, n_docs: int = 400, seed: int = 0) -> str:
    """Documents that count upward from a random start (next id = id + 1 mod 200): easy to learn."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(seed)
    prefix = str(prefix)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for _ in range(n_docs):
        start, length = int(rng.integers(0, 200)), int(rng.integers(20, 60))
        doc = (start + np.arange(length)) % 200
        builder.add_document(torch.from_numpy(np.append(doc, 255).astype(np.int64)), [length + 1])
    builder.finalize(prefix + ".idx")
    return prefix


def reset_parallel_state() -> None:
    """Destroy Megatron-Core's model-parallel groups (keep the default group) between runs of one worker,
    freeing their threads: a launch that runs many layouts would otherwise carry every earlier group."""
    from bridge.parallel.teardown import release_model_parallel_groups

    release_model_parallel_groups()


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def write_line(text: str) -> None:
    """Write one whole line to stdout with a single os.write.

    All ranks share torchrun's pipe. print() hands the text and its newline to Python's buffers separately,
    and a buffer that fills up in between sends the text alone, so another rank's line could land before
    the newline. Up to PIPE_BUF (4096) bytes one write is atomic on a pipe."""
    sys.stdout.flush()
    data = (text + "\n").encode()
    while data:
        data = data[os.write(sys.stdout.fileno(), data) :]


def emit(tag: str, payload) -> None:
    """One machine-readable line for the test to parse (rank 0 only)."""
    if rank() == 0:
        write_line(f"@@{tag} {json.dumps(payload)}")
