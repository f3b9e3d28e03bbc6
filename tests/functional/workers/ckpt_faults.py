"""2 ranks (DP=2, distributed optimizer), several runs in one launch: exact resume with dropout 0.1,
resuming a finished run, loading an iter_* folder / checkpoint.ckpt_step, retention with a partial
folder, damaged checkpoints and the fallback, override_opt_param_scheduler, exit_duration_in_mins; the
optimizer state resumed under another TP / DP size (checkpoint.dist_ckpt_optim_fully_reshardable)."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

from train_common import emit, rank, reset_parallel_state, run_model_chunks, tiny_config

from bridge.config.layout import run_layout
from bridge.config.run_plan import build_plan

DROPOUT = ["model.hidden_dropout=0.1", "model.attention_dropout=0.1", "train.train_iters=6"]


def barrier():
    import torch

    torch.distributed.barrier()


def run(*overrides, **kw):
    from bridge.training import pretrain

    try:
        return pretrain(tiny_config(*DROPOUT, *overrides), **kw)
    finally:
        reset_parallel_state()


def ints(d):
    return {int(k): v for k, v in d.items()}


def corrupt(folder: Path, how: str) -> None:
    shards = sorted(folder.glob("*.distcp"))
    if how == "truncated shard":
        with open(shards[0], "r+b") as f:
            f.truncate(shards[0].stat().st_size // 2)
    elif how == "deleted shard":
        shards[-1].unlink()
    elif how == "garbage metadata":
        (folder / ".metadata").write_bytes(b"garbage" * 10)
    elif how == "bad common.pt":  # Megatron-Core 0.19 writes none: its metadata.json instead
        name = "common.pt" if (folder / "common.pt").exists() else "metadata.json"
        (folder / name).write_bytes(b"\x80\x04garbage")
    elif how == "flipped bytes":
        data = bytearray(shards[0].read_bytes())
        mid = len(data) // 2
        data[mid : mid + 64] = bytes(b ^ 0x5A for b in data[mid : mid + 64])
        shards[0].write_bytes(bytes(data))


def main(workdir: str) -> None:
    from bridge import checkpoint
    from bridge.errors import ConfigError

    w = Path(workdir)
    # 1. Exact resume with dropout: uninterrupted vs stopped at 3 and resumed.
    ref = run()
    run(f"checkpoint.save={w}/a", "train.exit_interval=3")
    resumed = run(f"checkpoint.load={w}/a", f"checkpoint.save={w}/a")
    emit("dropout", {"ref": ref.losses, "resumed": resumed.losses, "ref_lr": ref.learning_rates})

    # 2. Resuming the finished run: nothing trained, the tracked iter_0000006 untouched.
    it6 = w / "a" / "iter_0000006"
    before = sorted((p.name, p.stat().st_ino, p.stat().st_mtime_ns) for p in it6.iterdir())
    again = run(f"checkpoint.load={w}/a", f"checkpoint.save={w}/a")
    after = sorted((p.name, p.stat().st_ino, p.stat().st_mtime_ns) for p in it6.iterdir())
    emit(
        "finished",
        {
            "losses": again.losses,
            "same_files": before == after,
            "latest": checkpoint.latest_iteration(w / "a"),
        },
    )

    # 3. checkpoint.load = an iter_* folder; checkpoint.ckpt_step on the root.
    folder = run(f"checkpoint.load={w}/a/iter_0000003", f"checkpoint.save={w}/b")
    step = run(f"checkpoint.load={w}/a", "checkpoint.ckpt_step=3")
    emit(
        "load_paths",
        {"folder": folder.losses, "step": step.losses, "b": checkpoint.latest_iteration(w / "b")},
    )

    # 4. most_recent_k=1 with a partial iter_0000009 left by a crashed (pre-manifest) save.
    if rank() == 0:
        shutil.copytree(w / "a" / "iter_0000006", w / "d" / "iter_0000006")
        (w / "d" / "latest_checkpointed_iteration.txt").write_text("6\n")
        shutil.copytree(w / "a" / "iter_0000006", w / "d" / "iter_0000009")
        (w / "d" / "iter_0000009" / "manifest.json").unlink()
    barrier()
    kept = run(
        f"checkpoint.load={w}/d", f"checkpoint.save={w}/d", "train.train_iters=8", "checkpoint.save_interval=1",
        "checkpoint.most_recent_k=1",
    )  # fmt: skip
    emit(
        "retention",
        {"losses": kept.losses, "left": sorted(p.name for p in (w / "d").iterdir()),
         "latest": checkpoint.latest_iteration(w / "d")},
    )  # fmt: skip

    # 5. Damaged latest checkpoint (iteration 6 of a copy of a): reported; the previous complete one
    #    (3) is loaded with a warning, or, with fallback_to_previous=false, one ConfigError.
    cases = ["truncated shard", "deleted shard", "garbage metadata", "bad common.pt", "flipped bytes"]
    damaged = {}
    from megatron.core.utils import get_model_config  # noqa: F401  (megatron imported once here)

    for i, how in enumerate(cases):
        root = w / f"damaged{i}"
        if rank() == 0:
            shutil.copytree(w / "a", root, ignore=shutil.ignore_patterns(".bridge.lock"))
            corrupt(root / "iter_0000006", how)
        barrier()
        try:
            load_model_only(root, fallback=False)
            damaged[how] = {"strict": "loaded"}
        except ConfigError as err:
            damaged[how] = {"strict": str(err)}
        if how == "flipped bytes":  # the whole resume, compared with the uninterrupted run
            got = run(f"checkpoint.load={root}", f"checkpoint.save={root}", "train.train_iters=4")
            damaged[how].update(losses=got.losses, latest=checkpoint.latest_iteration(root))
        else:
            damaged[how]["loaded"] = load_model_only(root, fallback=True)
    emit("damaged", damaged)

    # 6. override_opt_param_scheduler=True: the config's lr applies on resume.
    lr = run(
        f"checkpoint.load={w}/a", "checkpoint.ckpt_step=3", "optimizer.lr=0.01", "optimizer.min_lr=0.001"
    )
    cfg = build_plan(tiny_config(*DROPOUT), 2, cuda=False)
    emit(
        "lr",
        {
            "lrs": lr.learning_rates,
            "warmup": cfg.schedule.warmup_samples,
            "decay": cfg.schedule.decay_samples,
        },
    )

    # 7. train.exit_duration_in_mins: save and stop after the first iteration that passes it.
    timed = run(f"checkpoint.save={w}/e", "train.exit_duration_in_mins=0.00001")
    emit(
        "duration",
        {"losses": timed.losses, "reason": timed.exit_reason, "latest": checkpoint.latest_iteration(w / "e")},
    )

    # 8. The optimizer state across layouts
    optimizer_across_layouts(w)


def optimizer_across_layouts(w: Path) -> None:
    """Without dropout, an uninterrupted run under TP=2 (DP=1) and one under DP=2 (TP=1), each saving at 3
    with the optimizer state in Megatron-Core's fully_reshardable format; each checkpoint of 3 resumed under
    the other layout (TP2 -> TP1 with DP1 -> DP2, and DP2 -> DP1 with TP1 -> TP2) with its optimizer state."""
    from bridge.training import pretrain

    tp2 = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"]
    base = ["train.train_iters=6", "checkpoint.dist_ckpt_optim_fully_reshardable=true"]
    for name, saving, resuming in (("tp2_to_tp1", tp2, []), ("dp2_to_dp1", [], tp2)):
        try:
            full = pretrain(
                tiny_config(*base, f"checkpoint.save={w}/{name}", "checkpoint.save_interval=3", *saving)
            )
        finally:
            reset_parallel_state()
        try:
            resumed = pretrain(tiny_config(*base, f"checkpoint.load={w}/{name}", "checkpoint.ckpt_step=3",
                                           "checkpoint.load_rng=False", *resuming))  # fmt: skip
        finally:
            reset_parallel_state()
        emit(name, {"full": full.losses, "resumed": resumed.losses,
                    "grad_norms": [full.grad_norms, resumed.grad_norms]})  # fmt: skip


def load_model_only(root: Path, fallback: bool) -> str:
    """Load the root's checkpoint into a fresh model (weights only); returns the folder loaded."""
    from bridge.checkpoint import load_checkpoint

    cfg = tiny_config(*DROPOUT)
    from bridge.parallel import runtime

    runtime.initialize_distributed(run_layout(cfg, 2), seed=cfg.rng.seed)
    chunks = run_model_chunks(cfg, 2)
    warnings = []
    try:
        state = load_checkpoint(root, chunks, load_rng=False, fallback=fallback, on_fallback=warnings.append)
    finally:
        reset_parallel_state()
    return f"{Path(state['checkpoint_dir']).name} | {' '.join(warnings)}"


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    assert math.isfinite(0.0)
    main(sys.argv[1])
