"""2 ranks: one command with checkpoint.overwrite=true, stopped at iterations 2 and 4 and launched again
each time (a requeued job), over the checkpoints of an older run of another config: the flag applies once,
and the three launches give the losses of an uninterrupted run (tests/functional/test_overwrite_relaunch.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from train_common import emit, reset_parallel_state, tiny_config

RUN = ["train.train_iters=6", "checkpoint.save_interval=2"]


def main(workdir: str) -> None:
    from bridge.training import pretrain

    w = Path(workdir)
    # an older run of another config in the same save folder: iterations 2 and 4
    pretrain(tiny_config("train.train_iters=4", "checkpoint.save_interval=2", "optimizer.lr=0.01",
                         f"checkpoint.save={w}/s"))  # fmt: skip
    reset_parallel_state()
    full = pretrain(tiny_config(*RUN, f"checkpoint.save={w}/ref"))
    reset_parallel_state()
    # the same command three times: the preemption is train.exit_interval=2 (stop after saving 2, 4)
    command = [*RUN, f"checkpoint.save={w}/s", "checkpoint.overwrite=true", "train.exit_interval=2"]
    launches = []
    for _ in range(3):
        launches.append(pretrain(tiny_config(*command)).losses)
        reset_parallel_state()
    save = w / "s"
    retired = sorted(p.name for p in save.iterdir() if p.name.startswith(".overwritten-"))
    emit(
        "overwrite",
        {
            "uninterrupted": full.losses,
            "launches": launches,
            "iters": sorted(p.name for p in save.iterdir() if p.name.startswith("iter_")),
            "retired": [sorted(q.name for q in (save / r).iterdir()) for r in retired],
        },
    )


if __name__ == "__main__":
    main(sys.argv[1])
