"""2 ranks: train with saves every 2 iterations and die (os._exit) in the middle of the save at 4.

The hook runs after every rank wrote its shards of iter_0000004 and before the tracker moves, the
worst moment for a crash: the directory looks complete but must not be used.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

from train_common import tiny_config, write_line


def main(workdir: str) -> None:
    from bridge import checkpoint as checkpointing
    from bridge.training import pretrain

    def crash(target, iteration):
        if iteration == 4:
            write_line(f"@@crash rank {os.environ['RANK']} dies while saving {target}")
            # The checkpoint writer's helper processes would outlive the rank and hold the launcher's
            # stdout open; a killed job loses them too.
            for child in multiprocessing.active_children():
                child.kill()
            os._exit(17)

    checkpointing.AFTER_SHARDS_WRITTEN_HOOKS.append(crash)
    pretrain(
        tiny_config(
            f"checkpoint.save={workdir}/crash",
            "checkpoint.save_interval=2",
            "train.train_iters=6",
            "train.exit_interval=4",
            *sys.argv[2:],
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
