"""A frozen model's forward pass over a step's micro batches, before the trained model's pass: DPO's
reference (bridge.training.preference) and distillation's teacher (bridge.training.distill).

The step's micro batches are read once from the data iterators; the frozen model runs over them forward
only on Megatron-Core's schedule (the same layout as the trained model, so pipeline stages pass its
activations as they pass the trained model's), and what its loss function reports under `RESULT` on the
last pipeline stage is attached to each micro batch under `key`. The trained model's pass then reads the
same micro batches from fresh iterators.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

RESULT = "frozen pass"  # the report key a frozen forward step's loss function returns its result under


def frozen_report(result: torch.Tensor, output_tensor: torch.Tensor):
    """Megatron-Core's three-value loss for a frozen pass: nothing to train, `result` handed back."""
    one = torch.ones((), dtype=torch.int, device=result.device)
    return output_tensor.sum() * 0.0, one, {RESULT: result}


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The GPTModel inside the DDP / Float16Module wrappers."""
    while hasattr(module, "module"):
        module = module.module
    return module


def frozen_chunks(provider, plan, hooks: tuple = ()) -> list:
    """A second model on the plan's layout (no DDP wrapper), frozen and in eval mode; `hooks` run on the
    built chunks (e.g. weights streamed from a Hugging Face folder)."""
    for hook in hooks:
        provider.register_post_build_hook(hook, replaces_weights=True)
    chunks = provider.provide_distributed_model(
        wrap_with_ddp=False, seed=plan.config.rng.seed, random_init=not hooks, layout=plan.layout
    )
    for chunk in chunks:
        chunk.requires_grad_(False)
        chunk.eval()
    return chunks


class FrozenPass:
    """Runs `forward_step` with `chunks` (None: the trained model's own chunks, inside `weights()`) over
    each step's micro batches and attaches the results under `key`."""

    def __init__(
        self,
        chunks: list | None,
        forward_step: Callable,
        key: str,
        rows_per_sample: int = 1,
        weights: Callable[[list], Any] | None = None,
        metrics: Callable[[dict], dict[str, float]] | None = None,
    ):
        self.chunks = chunks
        self.forward_step = forward_step
        self.key = key
        self.rows_per_sample = rows_per_sample
        self.weights = weights
        self.metrics = metrics or (lambda totals: {})

    def results(self, ctx, batches: list[list[dict]]) -> list[torch.Tensor] | None:
        """The frozen model's result per micro batch (the last pipeline stage; None elsewhere)."""
        from megatron.core import parallel_state
        from megatron.core.pipeline_parallel import get_forward_backward_func

        model = self.chunks if self.chunks is not None else ctx.model
        was_training = [chunk.training for chunk in model]
        for chunk in model:
            chunk.eval()  # no dropout in a frozen model
        weights = self.weights(model) if self.weights is not None else contextlib.nullcontext()
        try:
            with torch.no_grad(), weights:
                out = get_forward_backward_func()(
                    forward_step_func=self.forward_step,
                    data_iterator=[iter(b) for b in batches],
                    model=model,
                    num_microbatches=ctx.num_microbatches,
                    seq_length=ctx.seq_length,
                    micro_batch_size=ctx.cfg.train.micro_batch_size * self.rows_per_sample,
                    decoder_seq_length=ctx.seq_length,
                    forward_only=True,
                )
        finally:
            for chunk, mode in zip(model, was_training, strict=True):
                chunk.train(mode)
        if not parallel_state.is_pipeline_last_stage(ignore_virtual=True):
            return None
        return [micro[RESULT] for micro in out]

    def attach(self, ctx, iterators: list) -> list[Iterator[dict]]:
        """The step's micro batches from `iterators` (one per model chunk), each with the result."""
        batches = [[next(it) for _ in range(ctx.num_microbatches)] for it in iterators]
        results = self.results(ctx, batches)
        if results is not None:  # only the last stage's loss reads them
            for per_chunk in batches:
                for i, batch in enumerate(per_chunk):
                    batch[self.key] = results[i]
        return [iter(b) for b in batches]
