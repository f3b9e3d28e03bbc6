"""Helpers shared by the runtime_* workers: a tiny GPT on Megatron-Core, a fixed batch, one schedule call."""

from __future__ import annotations

import faulthandler
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `import bridge`

import torch  # noqa: E402

# A hung collective would otherwise sit until the launcher's timeout: dump every stack and exit.
faulthandler.dump_traceback_later(180, exit=True)

from bridge.models.gpt_provider import GPTModelProvider  # noqa: E402
from bridge.parallel.layout import ParallelLayout  # noqa: E402

VOCAB = 256  # a multiple of 128 * tp for tp <= 2: the padded vocab (and so the init draws) match
SEQ = 16
MICRO_BATCH = 2


def layout(world: int, **sizes) -> ParallelLayout:
    return ParallelLayout(world_size=world, **sizes)


def check(condition: bool, message: str) -> None:
    """Fail the whole launch with a readable message (assert would vanish under python -O)."""
    if not condition:
        raise AssertionError(message)


def rank() -> int:
    return torch.distributed.get_rank()


def gpt_provider(
    tp: int = 1, pp: int = 1, sp: bool = False, ep: int = 1, num_moe_experts: int | None = None
) -> GPTModelProvider:
    """A Llama-style tiny model (RMSNorm, SwiGLU, RoPE, GQA, no biases).

    Without CUDA the provider builds with use_cpu_initialization: Megatron-Core draws every full
    weight from the CPU generator and keeps this rank's slice, so models built from the same seed
    at TP=1 and TP=2 hold the same weights.
    """
    moe = {}
    if num_moe_experts:
        moe = dict(
            num_moe_experts=num_moe_experts, moe_router_topk=2, moe_token_dispatcher_type="alltoall",
            moe_ffn_hidden_size=32,
            moe_aux_loss_coeff=1e-2,  # exercises the aux-loss tracker (device="cuda") and its backward
        )  # fmt: skip
    return GPTModelProvider(
        num_layers=4, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4, num_query_groups=2,
        vocab_size=VOCAB, seq_length=SEQ, normalization="RMSNorm", activation_func="silu",
        gated_linear_unit=True, add_bias_linear=False, position_embedding_type="rope",
        hidden_dropout=0.0, attention_dropout=0.0,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, sequence_parallel=sp,
        expert_model_parallel_size=ep, **moe,
    )  # fmt: skip


def build_model(provider: GPTModelProvider, *, wrap_ddp: bool = False, distributed_optimizer: bool = False):
    """This rank's single model chunk, optionally wrapped in Megatron-Core DDP.

    With distributed_optimizer, DDP reduce-scatters: each DP rank then holds only its shard of the
    synced gradients, so gradient comparisons use the all-reduce mode.
    """
    ddp_config = dict(use_distributed_optimizer=distributed_optimizer, grad_reduce_in_fp32=True)
    chunks = provider.provide_distributed_model(wrap_with_ddp=wrap_ddp, ddp_config=ddp_config)
    check(len(chunks) == 1, f"one chunk without virtual pipeline stages, got {len(chunks)}")
    return chunks[0]


def batches(num_microbatches: int, seed: int = 0) -> list[dict]:
    """The same token batches on every rank (drawn from a private generator, not the global one)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num_microbatches):
        tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ + 1), generator=gen)
        out.append(
            {
                "tokens": tokens[:, :-1].contiguous(),
                "labels": tokens[:, 1:].contiguous(),
                "position_ids": torch.arange(SEQ).expand(MICRO_BATCH, SEQ).contiguous(),
            }
        )
    return out


def _loss(output_tensor, loss_mask=None):
    loss = output_tensor.float().mean()
    return loss, {"lm loss": loss.detach().clone()}


def _forward_step(data_iterator, model):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], attention_mask=None, labels=batch["labels"])
    return output, partial(_loss)


def run_schedule(model_chunks: list, data: list[dict], *, forward_only: bool = False) -> list[float]:
    """Megatron-Core's forward_backward_func for this layout; returns the per-microbatch losses (last stage)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    losses = get_forward_backward_func()(
        forward_step_func=_forward_step,
        data_iterator=iter(data),
        model=model_chunks,
        num_microbatches=len(data),
        seq_length=SEQ,
        micro_batch_size=MICRO_BATCH,
        forward_only=forward_only,
    )
    return [float(item["lm loss"]) for item in losses]


def attach_grad_finalization(model_chunks: list) -> None:
    """What a training loop sets so the schedule syncs DDP grads (and SP norm grads over TP)."""
    from megatron.core.distributed import finalize_model_grads

    config = model_chunks[0].config
    config.no_sync_func = model_chunks[0].no_sync
    config.grad_sync_func = None
    config.finalize_model_grads_func = finalize_model_grads


def grads(module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient by name (DDP keeps them in main_grad)."""
    out = {}
    for name, param in module.named_parameters():
        grad = getattr(param, "main_grad", None)
        if grad is None:
            grad = param.grad
        out[name.removeprefix("module.")] = None if grad is None else grad.detach().clone()
    return out
