"""strategy fsdp2 checkpoints (torch DCP shards): save / resume reproduces the uninterrupted run exactly,
the checkpoint reshards onto HSDP (dp_replicate=2 x dp_shard=2) and onto 2 ranks (dp=2), and the
mistakes are ConfigErrors. Every run: 6 iterations of the tiny Llama with clipping active.

usage: fsdp2_checkpoints.py WORKDIR MODE   (MODE: world4 on 4 ranks, then world2 on 2 ranks)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from train_common import emit, reset_parallel_state, tiny_config, write_learnable_indexed_data

from bridge.config.layout import run_layout


def main(workdir: str, mode: str) -> None:
    import torch

    from bridge import checkpoint as checkpointing
    from bridge.errors import ConfigError
    from bridge.parallel import runtime
    from bridge.training import pretrain

    w = Path(workdir)
    data = f"{workdir}/data/count"
    fsdp2 = [
        "distributed.strategy=fsdp2",
        "optimizer.use_distributed_optimizer=False",
        "dataset.kind=indexed",
        f"dataset.data_paths=[{data}]",
        'dataset.split="1,0,0"',
        f"dataset.cache_dir={workdir}/cache",
        "train.train_iters=6",
        "optimizer.lr=0.003",
        "optimizer.min_lr=0.0003",
        "optimizer.clip_grad=0.5",
    ]
    world = int(os.environ["WORLD_SIZE"])
    runtime.initialize_distributed(run_layout(tiny_config(*fsdp2), world), seed=1234)
    if mode == "world4":
        if torch.distributed.get_rank() == 0:
            write_learnable_indexed_data(data)
        torch.distributed.barrier()
    reset_parallel_state()

    def run(*extra: str):
        result = pretrain(tiny_config(*fsdp2, *extra))
        reset_parallel_state()
        return {"losses": result.losses, "grad_norms": result.grad_norms}

    def error(*extra: str) -> str:
        try:
            pretrain(tiny_config(*fsdp2, *extra))
            return "none"
        except ConfigError as err:
            return str(err)
        finally:
            reset_parallel_state()

    if mode == "world4":
        emit("uninterrupted", run())
        emit("stopped", run(f"checkpoint.save={w}/a", "train.exit_interval=3"))
        emit("resumed", {**run(f"checkpoint.load={w}/a", f"checkpoint.save={w}/b"),
                         "latest": checkpointing.latest_iteration(w / "b")})  # fmt: skip
        emit("hsdp", run(f"checkpoint.load={w}/a", "distributed.dp_replicate_size=2"))  # same ranks: RNG too
        tp2 = [
            "model.tensor_model_parallel_size=2",
            "model.sequence_parallel=True",
            "checkpoint.load_rng=False",
        ]
        emit("tp2_error", error(f"checkpoint.load={w}/a", *tp2))
        megatron = ["distributed.strategy=megatron", "optimizer.use_distributed_optimizer=True"]
        emit("strategy_error", error(f"checkpoint.load={w}/a", *megatron))
        # an fsdp2 checkpoint as weights only (loaded after fully_shard); torch_dist weights into fsdp2:
        # tests/functional/test_training_parallel.py
        one = ["train.train_iters=1", "scheduler.lr_warmup_iters=0"]
        emit("from_fsdp2", run(f"checkpoint.pretrained_checkpoint={w}/a", *one))
    else:  # 2 ranks: dp 4 -> 2, same global batch
        emit("dp2_rng_error", error(f"checkpoint.load={w}/a"))
        emit("dp2", run(f"checkpoint.load={w}/a", "checkpoint.load_rng=False"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
