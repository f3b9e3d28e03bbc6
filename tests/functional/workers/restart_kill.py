"""2 ranks under torchrun --max-restarts (the test starts it): train 8 iterations saving every iteration.
`kill` mode: in the first attempt rank 1 kills itself (-9) in the middle of saving iteration 3 (after
every rank wrote its part, at the manifest stage: rank 0 publishes it, the workers resume from 3); in the second
attempt rank 0 kills itself once iteration 6 is saved and tracked. No checkpoint.load: every attempt
resumes from checkpoint.save by itself (the plan's resume). `plain` mode: the same run, uninterrupted."""

from __future__ import annotations

import os
import signal
import sys

from train_common import tiny_config, write_line

KILLS = {0: ("manifest_written", 3, 1), 1: ("done", 6, 0)}  # attempt -> (save stage, iteration, rank)


def main(workdir: str, mode: str) -> None:
    from bridge import checkpoint
    from bridge.training import pretrain

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ["RANK"])
    write_line(f"@@attempt {attempt} rank {rank} pid {os.getpid()}")

    def stage(name, folder, iteration):
        if mode == "kill" and KILLS.get(attempt) == (name, iteration, rank):
            write_line(f"@@kill -9 rank {rank} at {name} of iteration {iteration} (attempt {attempt})")
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint.SAVE_STAGE_HOOKS.append(stage)
    result = pretrain(
        tiny_config("train.train_iters=8", f"checkpoint.save={workdir}/ck", "checkpoint.save_interval=1")
    )
    write_line(f"@@finished attempt {attempt} rank {rank} iteration {result.iteration}")


if __name__ == "__main__":
    main(*sys.argv[1:])
