"""2 ranks, bf16 on CPU (the plan trains fp32 without CUDA; CPU matmuls take bf16, so the plan's precision
is set to bf16 here, as build_plan sets it on a GPU): strategy megatron (Float16Module, fp32 master weights
in the distributed optimizer) and strategy fsdp2 (MixedPrecisionPolicy) for 3 iterations from the same
seed and data, on DP=2 and on PP=2, with what fsdp2 shards recorded (each module's parameter dtype and policy). Then a run in
which rank 1 raises at its third micro batch, left through bridge.process_exit.exit_if_distributed as
run_recipe.py leaves: the launch must fail (not hang) with rank 1's traceback.
usage: fsdp2_bf16.py WORKDIR"""

from __future__ import annotations

import dataclasses
import sys

from train_common import (
    emit,
    rank,
    reset_parallel_state,
    tiny_config,
    write_learnable_indexed_data,
    write_line,
)

from bridge.config.layout import run_layout
from bridge.config.run_plan import Precision, build_plan
from bridge.process_exit import exit_if_distributed

SHARDED: list[dict] = []  # per fully_shard call of the last fsdp2 run


def bf16_plan(cfg):
    plan = build_plan(cfg, 2, cuda=False)
    provider = dataclasses.replace(plan.provider, bf16=True, params_dtype="bf16", pipeline_dtype="bf16")
    return dataclasses.replace(
        plan, precision=Precision(requested="bf16_mixed", name="bf16"), provider=provider
    )


def recording_fully_shard():
    from torch.distributed import fsdp

    original = fsdp.fully_shard

    def record(module, **kwargs):
        policy = kwargs["mp_policy"]
        SHARDED.append({
            "module": type(module).__name__,
            "param_dtypes": sorted({str(p.dtype) for p in module.parameters(recurse=False)}
                                   | {str(p.dtype) for p in module.parameters()}),
            "param_dtype": str(policy.param_dtype), "reduce_dtype": str(policy.reduce_dtype),
            "output_dtype": str(policy.output_dtype),
        })  # fmt: skip
        return original(module, **kwargs)

    fsdp.fully_shard = record


def main(workdir: str) -> None:
    import torch

    from bridge.parallel import runtime
    from bridge.training import pretrain
    from bridge.training.forward_step import forward_step

    data = f"{workdir}/data/count"
    common = [
        "dataset.kind=indexed", f"dataset.data_paths=[{data}]", 'dataset.split="1,0,0"',
        f"dataset.cache_dir={workdir}/cache", "train.train_iters=3", "optimizer.lr=0.003",
        "optimizer.min_lr=0.0003", "train.global_batch_size=4", "train.micro_batch_size=1",
    ]  # fmt: skip
    cfg = tiny_config(*common)
    runtime.initialize_distributed(run_layout(cfg, 2), seed=cfg.rng.seed)
    if torch.distributed.get_rank() == 0:
        write_learnable_indexed_data(data)
    torch.distributed.barrier()
    reset_parallel_state()
    recording_fully_shard()
    fsdp2 = ["distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=False"]
    pp2 = ["model.pipeline_model_parallel_size=2"]  # the first stage's root returns bf16 to the p2p send
    runs = (
        ("megatron_bf16", []),
        ("fsdp2_bf16", fsdp2),
        ("megatron_bf16_pp2", pp2),
        ("fsdp2_bf16_pp2", [*fsdp2, *pp2]),
    )
    for name, extra in runs:
        SHARDED.clear()
        result = pretrain(bf16_plan(tiny_config(*common, *extra)))
        emit(
            "run", {"run": name, "losses": result.losses, "grad_norms": result.grad_norms, "sharded": SHARDED}
        )
        reset_parallel_state()

    calls = {"n": 0}

    def failing_step(data_iterator, model):
        calls["n"] += 1
        if rank() == 1 and calls["n"] == 3:  # 2 micro batches per step: the second step's first
            raise RuntimeError("injected failure on rank 1")
        return forward_step(data_iterator, model)

    try:
        pretrain(bf16_plan(tiny_config(*common, *fsdp2, "train.train_iters=5")), failing_step)
    except Exception as error:
        exit_if_distributed(error)
        raise
    write_line(f"@@unexpected rank {rank()} finished the failing run")


if __name__ == "__main__":
    main(sys.argv[1])
