"""2 ranks (DP=2), optimizer.optimizer=muon: a run stopped at iteration 2 (saving Muon's momentum and
Adam's moments in the torch_dist checkpoint) and resumed to 4 reproduces the uninterrupted run's losses
and grad norms exactly."""

from __future__ import annotations

import sys
from pathlib import Path

from train_common import emit, reset_parallel_state, tiny_config

MUON = [
    "optimizer.optimizer=muon",
    "optimizer.use_distributed_optimizer=false",
    "distributed.overlap_param_gather=false",
    "optimizer.lr=0.01",
    "optimizer.muon_nesterov=true",
    "train.train_iters=4",
]


def main(workdir: str) -> None:
    from bridge.training import pretrain

    w = Path(workdir)
    full = pretrain(tiny_config(*MUON))
    emit("uninterrupted", {"losses": full.losses, "grad_norms": full.grad_norms})
    reset_parallel_state()
    pretrain(tiny_config(*MUON, f"checkpoint.save={w}/m", "train.exit_interval=2"))
    reset_parallel_state()
    resumed = pretrain(tiny_config(*MUON, f"checkpoint.load={w}/m", f"checkpoint.save={w}/m"))
    emit("resumed", {"losses": resumed.losses, "grad_norms": resumed.grad_norms})
    # without the optimizer state the next step differs: the saved state is what makes it exact
    reset_parallel_state()
    fresh = pretrain(tiny_config(*MUON, f"checkpoint.load={w}/m", "checkpoint.ckpt_step=2",
                                 "checkpoint.load_optim=False"))  # fmt: skip
    emit("without_optimizer_state", {"losses": fresh.losses})
    reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1])
