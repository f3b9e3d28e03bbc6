"""Context parallelism on CPU (gloo): the same 3 iterations under CP=1 and CP=2 layouts.

`ref` (1 rank): writes the data and one initial checkpoint, then trains CP=1 (the reference).
`cp2` (2 ranks): CP=2. `cp2_tp2_pp2` (4 ranks): CP=2 x TP=2 (+SP), then CP=2 x PP=2.
Every run loads the same initial weights and emits, per iteration, the lm loss and grad norm and, at
iterations 1 and 3, each parameter's gradient norm (by global name: TP shards summed, PP layers renumbered).
"""

from __future__ import annotations

import re
import sys

from train_common import (
    emit,
    reset_parallel_state,
    run_model_chunks,
    tiny_config,
    write_learnable_indexed_data,
)

from bridge.config.layout import run_layout

ITERS = 3


def common(workdir: str) -> list[str]:
    return [
        "dataset.kind=indexed",
        f"dataset.data_paths=[{workdir}/data/count]",
        'dataset.split="1,0,0"',
        f"dataset.cache_dir={workdir}/cache",
        f"train.train_iters={ITERS}",
        "optimizer.lr=0.003",
        "optimizer.min_lr=0.0003",
        # Megatron-Core's DDP all-reduces whole gradients (the distributed optimizer would leave each
        # dp*cp rank only its shard), so every rank can read the finished gradients after a step.
        "optimizer.use_distributed_optimizer=False",
        "distributed.overlap_param_gather=False",
        f"checkpoint.pretrained_checkpoint={workdir}/init",
    ]


def param_grad_norms(ctx) -> dict[str, float]:
    """{global parameter name: gradient norm} on rank 0, from every rank's finished gradients."""
    import torch
    from megatron.core import parallel_state as ps

    tp_rank = ps.get_tensor_model_parallel_rank()
    first_of_replicas = ps.get_data_parallel_rank(with_context_parallel=True) == 0
    layers_per_stage = ctx.cfg.model.num_layers // ps.get_pipeline_model_parallel_world_size()
    offset = ps.get_pipeline_model_parallel_rank() * layers_per_stage
    local: dict[str, float] = {}
    if first_of_replicas:
        for chunk in ctx.model:
            for name, param in chunk.named_parameters():
                sharded = getattr(param, "tensor_model_parallel", False)
                if not sharded and tp_rank != 0:
                    continue
                grad = getattr(param, "main_grad", None)
                grad = param.grad if grad is None else grad
                name = re.sub(r"^(module\.)+", "", name)
                name = re.sub(r"layers\.(\d+)\.", lambda m: f"layers.{int(m.group(1)) + offset}.", name)
                local[name] = local.get(name, 0.0) + float(grad.double().pow(2).sum())
    gathered = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, local)
    total: dict[str, float] = {}
    for part in gathered:
        for name, sq in part.items():
            total[name] = total.get(name, 0.0) + sq
    return {name: sq**0.5 for name, sq in sorted(total.items())}


def record_grads(name: str) -> None:
    """Wrap the loop's train_step: after iterations 1 and ITERS, emit the per-parameter gradient norms."""
    import bridge.training.train as loop

    original = getattr(loop.train_step, "__wrapped__", loop.train_step)

    def train_step(ctx):
        out = original(ctx)
        iteration = ctx.state.iteration + 1
        if iteration in (1, ITERS):
            emit("grads", {"run": name, "iteration": iteration, "norms": param_grad_norms(ctx)})
        return out

    train_step.__wrapped__ = original
    loop.train_step = train_step


def run(name: str, workdir: str, *extra: str) -> None:
    from bridge.training import pretrain

    record_grads(name)
    result = pretrain(tiny_config(*common(workdir), *extra))
    emit("run", {"run": name, "losses": result.losses, "grad_norms": result.grad_norms})
    reset_parallel_state()


def main(mode: str, workdir: str) -> None:
    if mode == "ref":
        import torch

        from bridge.checkpoint import save_checkpoint
        from bridge.parallel import runtime

        cfg = tiny_config(*common(workdir))
        runtime.initialize_distributed(run_layout(cfg, 1), seed=cfg.rng.seed)
        write_learnable_indexed_data(f"{workdir}/data/count")
        chunks = run_model_chunks(cfg, 1)
        save_checkpoint(f"{workdir}/init", 0, chunks, save_rng=False)
        del chunks
        torch.distributed.barrier()
        reset_parallel_state()
        run("cp1", workdir)
    elif mode == "cp2":
        run("cp2", workdir, "model.context_parallel_size=2")
    elif mode == "cp2_tp2_pp2":
        cp2 = "model.context_parallel_size=2"
        run("cp2_tp2", workdir, cp2, "model.tensor_model_parallel_size=2", "model.sequence_parallel=True")
        run("cp2_pp2", workdir, cp2, "model.pipeline_model_parallel_size=2")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
