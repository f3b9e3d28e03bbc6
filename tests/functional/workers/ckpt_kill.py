"""2 ranks: train 6 iterations saving every iteration (resuming from what is there); every stage of a
save prints `@@stage <stage> <iteration> <rank>` and pauses briefly, so the test can kill -9 ranks at a
chosen point of a save. A second argument `async` saves with checkpoint.async_save (its extra stage
`write_started`: the writer is forked and the next steps run while it writes)."""

from __future__ import annotations

import os
import sys
import time

from train_common import tiny_config, write_line


def main(workdir: str, mode: str = "sync") -> None:
    from bridge import checkpoint
    from bridge.training import pretrain

    write_line(f"@@pid {os.environ['RANK']} {os.getpid()}")

    def stage(name, folder, iteration):
        write_line(f"@@stage {name} {iteration} {os.environ['RANK']}")
        time.sleep(0.2)

    checkpoint.SAVE_STAGE_HOOKS.append(stage)
    if mode == "async":
        _slow_writers(float(os.environ.get("BRIDGE_SLOW_WRITER_S", "1.0")))
    os.makedirs(f"{workdir}/ck", exist_ok=True)  # checkpoint.load must exist (empty: start from scratch)
    pretrain(
        tiny_config(
            "train.train_iters=6",
            f"checkpoint.save={workdir}/ck",
            f"checkpoint.load={workdir}/ck",
            "checkpoint.save_interval=1",
            "checkpoint.most_recent_k=2",
            f"checkpoint.async_save={mode == 'async'}",
        )
    )


def _slow_writers(seconds: float) -> None:
    """Every forked writer sleeps `seconds` before writing, so that the next steps (and a kill or a
    signal) come while a write is in flight."""
    from bridge.checkpoint.async_writes import AsyncSaves

    schedule = AsyncSaves.schedule

    def slowed(self, request, pending):
        write = request.async_fn

        def slow_write(*args, **kwargs):
            time.sleep(seconds)
            return write(*args, **kwargs)

        return schedule(self, request._replace(async_fn=slow_write), pending)

    AsyncSaves.schedule = slowed


if __name__ == "__main__":
    main(*sys.argv[1:])
