"""2 ranks (DP=2), optimizer.optimizer=muon: a run stopped at iteration 2 (saving Muon's momentum and
Adam's moments in the torch_dist checkpoint) and resumed to 4 reproduces the uninterrupted run's losses
and grad norms exactly (where the installed release runs Muon). Then QK-clip (MuonClip with Muon, else
with Adam) trains with a threshold below the logits, so every step clips."""

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


def qk_clip_run() -> None:
    from bridge.config.checks.muon import MEGATRON_CORE_MIN, _release, emerging_optimizers_version
    from bridge.models.transformer_fields import INSTALLED_RELEASE
    from bridge.training import pretrain

    muon = _release(INSTALLED_RELEASE) >= MEGATRON_CORE_MIN and emerging_optimizers_version() is not None
    optimizer = MUON[:-1] if muon else MUON[1:3]
    # lr 1e-4: the steps barely move the logits, the clip (to tau = 0.05) dominates
    clip = ["model.qk_clip=true", "model.qk_clip_threshold=0.05", "train.train_iters=3", "optimizer.lr=1e-4",
            "optimizer.min_lr=0"]  # fmt: skip
    clipped = pretrain(tiny_config(*optimizer, *clip))
    emit("qk_clip", {"optimizer": "muon" if muon else "adam", "metrics": clipped.metrics,
                     "losses": clipped.losses})  # fmt: skip
    reset_parallel_state()


def main(workdir: str) -> None:
    from bridge.config.checks.muon import MEGATRON_CORE_MIN, _release, emerging_optimizers_version
    from bridge.models.transformer_fields import INSTALLED_RELEASE
    from bridge.training import pretrain

    qk_clip_run()
    if _release(INSTALLED_RELEASE) < MEGATRON_CORE_MIN or emerging_optimizers_version() is None:
        return  # the plan refuses Muon here (tests/unit/test_muon.py)
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
