"""2 ranks (DP=2, distributed optimizer), several runs in one launch (issue 27): the same command run
again resumes or, finished, trains nothing, and leaves the first run's checkpoints byte-identical; a
changed config is refused before training; checkpoint.overwrite replaces through a staging folder; a
damaged latest checkpoint falls back, retrains, and the retrained one is tracked; a failed resume
releases the lock; a disk that fills during a later save is one error and leaves no staging folder."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from train_common import emit, rank, reset_parallel_state, tiny_config

# one lr schedule for every length (decay over 8 iterations), so a resumed run continues the reference
RUN = ["train.train_iters=4", "checkpoint.save_interval=2", "scheduler.lr_decay_iters=8"]


def barrier() -> None:
    import torch

    torch.distributed.barrier()


def run(*overrides):
    from bridge.training import pretrain

    try:
        return pretrain(tiny_config(*RUN, *overrides))
    finally:
        reset_parallel_state()


def error(*overrides) -> str:
    from bridge.errors import ConfigError

    try:
        run(*overrides)
    except ConfigError as err:
        return str(err)
    return "no error"


def digest(root: Path) -> dict[str, str]:
    """Every file under `root` (lock aside) -> sha256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".bridge.lock"
    }


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def main(workdir: str, full_disk: str) -> None:
    from bridge import checkpoint
    from bridge.checkpoint import manifest

    w = Path(workdir)
    ref = run("train.train_iters=6", "checkpoint.save_interval=0")  # the uninterrupted run: the reference
    # 1. The same command twice, then longer: resumed, the first run's files untouched.
    save = f"checkpoint.save={w}/r"
    first = run(save)
    before = digest(w / "r")
    again = run(save)
    same_after_again = digest(w / "r") == before
    longer = run(save, "train.train_iters=6")
    after = digest(w / "r")
    kept = {k: after.get(k) == v for k, v in before.items() if k.startswith("iter_")}
    refused = error(save, "optimizer.lr=0.001")
    emit(
        "rerun",
        {"first": first.losses, "again": again.losses, "again_iteration": again.iteration,
         "same_after_again": same_after_again, "longer": longer.losses, "ref": ref.losses,
         "kept": kept, "refused": refused, "same_after_refused": digest(w / "r") == after,
         "left": names(w / "r")},
    )  # fmt: skip

    # 2. checkpoint.overwrite: another config starts from scratch and replaces iteration 2 atomically.
    over = run(save, "optimizer.lr=0.001", "train.train_iters=2", "checkpoint.overwrite=true")
    now = digest(w / "r")
    emit(
        "overwrite",
        {"losses": over.losses, "iter2_changed": now["iter_0000002/manifest.json"] != after["iter_0000002/manifest.json"],
         "iter2_verified": manifest.verify(w / "r" / "iter_0000002") == [],
         "latest": checkpoint.latest_iteration(w / "r"), "left": names(w / "r")},
    )  # fmt: skip

    # 3. A damaged latest checkpoint: the re-run falls back to 6, retrains 7-8, and its 8 is tracked.
    fsave = f"checkpoint.save={w}/f"
    full = run(fsave, "train.train_iters=8")
    shard = sorted((w / "f" / "iter_0000008").glob("*.distcp"))[0]
    if rank() == 0:
        with open(shard, "r+b") as f:
            f.truncate(shard.stat().st_size // 2)
    barrier()
    retrained = run(fsave, "train.train_iters=8")
    third = run(fsave, "train.train_iters=8")
    # a resume that fails (another layout with optimizer state) leaves no lock behind
    layout = error(
        fsave, f"checkpoint.load={w}/f", "train.train_iters=10", "model.tensor_model_parallel_size=2"
    )
    emit(
        "fallback",
        {"full": full.losses, "retrained": retrained.losses, "third": third.losses,
         "latest": checkpoint.latest_iteration(w / "f"),
         "iter8_verified": manifest.verify(w / "f" / "iter_0000008") == [],
         "layout_error": layout, "lock_left": (w / "f" / ".bridge.lock").exists(), "left": names(w / "f")},
    )  # fmt: skip

    # 3b. A tracker holding garbage: the newest complete checkpoint (8) is resumed, then tracked again.
    if rank() == 0:
        shutil.copytree(w / "f", w / "g", ignore=shutil.ignore_patterns(".bridge.lock"))
        (w / "g" / "latest_checkpointed_iteration.txt").write_text("\x00garbage")
    barrier()
    longer = run(f"checkpoint.save={w}/g", "train.train_iters=10")
    emit("garbage_tracker", {"losses": longer.losses, "latest": checkpoint.latest_iteration(w / "g")})

    # 4. A disk (a small tmpfs) that fills during a later save: one error, no staging folder left.
    if full_disk != "-":
        message = error(f"checkpoint.save={full_disk}", "train.train_iters=40", "checkpoint.save_interval=2")
        emit("disk_full", {"message": message, "left": names(Path(full_disk)),
                           "free": shutil.disk_usage(full_disk).free})  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
