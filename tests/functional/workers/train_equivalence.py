"""4 ranks: one initial checkpoint, then the same 3 iterations under several layouts and strategies.

TP1/PP1 (DP=4) is the reference and trains 30 iterations (loss must fall on learnable data); TP2+SP,
PP2 with full activation recompute, TP2xPP2xVPP2 and the `ddp` strategy load the same weights (resharded from the TP1/PP1 checkpoint)
and stop after 3 iterations of the same 30-iteration schedule.
"""

from __future__ import annotations

import sys

from train_common import (
    emit,
    reset_parallel_state,
    run_model_chunks,
    tiny_config,
    write_learnable_indexed_data,
)

from bridge.config.layout import run_layout


def main(workdir: str) -> None:
    import torch

    from bridge.checkpoint import save_checkpoint
    from bridge.training import pretrain

    data = f"{workdir}/data/count"
    common = [
        "dataset.kind=indexed",
        f"dataset.data_paths=[{data}]",
        'dataset.split="1,0,0"',
        f"dataset.cache_dir={workdir}/cache",
        "train.train_iters=30",
        "optimizer.lr=0.003",
        "optimizer.min_lr=0.0003",
        f"checkpoint.pretrained_checkpoint={workdir}/init",
    ]

    # The initial weights, saved through the model-only checkpoint path from a TP1/PP1 model.
    cfg = tiny_config(*common)
    from bridge.parallel import runtime

    runtime.initialize_distributed(run_layout(cfg, 4), seed=cfg.rng.seed)
    if torch.distributed.get_rank() == 0:
        write_learnable_indexed_data(data)
    torch.distributed.barrier()
    chunks = run_model_chunks(cfg, 4)
    save_checkpoint(f"{workdir}/init", 0, chunks, save_rng=False)
    del chunks
    reset_parallel_state()

    runs = {
        "tp1pp1": [],
        "tp2_sp": [
            "model.tensor_model_parallel_size=2",
            "model.sequence_parallel=True",
            "train.exit_interval=3",
        ],
        "pp2_recompute": [
            "model.pipeline_model_parallel_size=2",
            "distributed.activation_checkpointing=True",
            "train.exit_interval=3",
        ],
        "tp2pp2vpp2": [
            "model.tensor_model_parallel_size=2",
            "model.pipeline_model_parallel_size=2",
            "model.virtual_pipeline_model_parallel_size=2",
            "model.sequence_parallel=True",
            "train.exit_interval=3",
        ],
        "ddp": ["distributed.strategy=ddp", "train.exit_interval=3"],
        # fsdp2 loads the torch_dist weights into the plain chunks before fully_shard
        "fsdp2": [
            "distributed.strategy=fsdp2",
            "train.exit_interval=3",
            "optimizer.use_distributed_optimizer=False",
        ],
    }
    for name, extra in runs.items():
        result = pretrain(tiny_config(*common, *extra))
        emit("losses", {"run": name, "losses": result.losses})
        reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1])
