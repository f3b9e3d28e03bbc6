"""2 ranks (DP=2, distributed optimizer): resume after a crash, save/resume == uninterrupted, and a
non-finite loss stops the run without touching the last good checkpoint."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from train_common import emit, reset_parallel_state, tiny_config

RUN = ["train.train_iters=6"]  # extended by command-line overrides


def nan_forward_step(bad_iteration: int, num_microbatches: int):
    """The default forward step, with the loss poisoned on every microbatch of `bad_iteration`."""
    from bridge.training.forward_step import forward_step

    calls = {"n": 0}

    def step(data_iterator, model):
        output, loss_func = forward_step(data_iterator, model)
        calls["n"] += 1
        if (calls["n"] - 1) // num_microbatches + 1 != bad_iteration:
            return output, loss_func

        def poisoned(output_tensor):
            loss, tokens, report = loss_func(output_tensor)
            return loss * math.nan, tokens, {k: v * math.nan for k, v in report.items()}

        return output, poisoned

    return step


def main(workdir: str) -> None:
    from bridge import checkpoint as checkpointing
    from bridge.training import pretrain
    from bridge.training.state import NonFiniteLossError

    w = Path(workdir)
    # 1. The crashed run left iter_0000004 on disk, but the tracker still names iteration 2.
    emit(
        "after_crash",
        {
            "latest": checkpointing.latest_iteration(w / "crash"),
            "partial_exists": (w / "crash" / "iter_0000004").exists(),
            "staging_exists": (w / "crash" / ".iter_0000004.saving").exists(),
        },
    )
    crashed = pretrain(
        tiny_config(
            *RUN,
            f"checkpoint.load={w}/crash",
            f"checkpoint.save={w}/crash",
            "checkpoint.save_interval=2",
            "train.exit_interval=4",
        )
    )
    emit("crash_resumed", {"losses": crashed.losses, "latest": checkpointing.latest_iteration(w / "crash")})
    reset_parallel_state()

    # 2. Uninterrupted reference.
    # (it also evaluates every 3 iterations: evaluation must not disturb training)
    full = pretrain(tiny_config(*RUN, "validation.eval_interval=3", "validation.eval_iters=2"))
    emit(
        "uninterrupted",
        {"losses": full.losses, "grad_norms": full.grad_norms, "validation": full.validation_losses},
    )
    reset_parallel_state()

    # 3. Stop at 3 (saving), resume to 6.
    pretrain(tiny_config(*RUN, f"checkpoint.save={w}/a", "train.exit_interval=3"))
    reset_parallel_state()
    resumed = pretrain(tiny_config(*RUN, f"checkpoint.load={w}/a", f"checkpoint.save={w}/a"))
    emit(
        "resumed",
        {
            "losses": resumed.losses,
            "grad_norms": resumed.grad_norms,
            "latest": checkpointing.latest_iteration(w / "a"),
        },
    )
    reset_parallel_state()

    # 4. Resume the 6-iteration checkpoint under TP=2: optimizer/RNG state cannot follow (ConfigError
    #    unless dropped); the weights reshard, so iteration 7 matches the same resume under TP=1.
    from bridge.errors import ConfigError

    tp2 = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"]
    try:
        pretrain(tiny_config("train.train_iters=7", f"checkpoint.load={w}/a", *tp2))
        emit("reshard_error", "none")
    except ConfigError as err:
        emit("reshard_error", str(err))
    fresh = ["train.train_iters=7", f"checkpoint.load={w}/a", "checkpoint.load_optim=False",
             "checkpoint.load_rng=False"]  # fmt: skip
    on_tp2 = pretrain(tiny_config(*fresh, *tp2))
    reset_parallel_state()
    on_tp1 = pretrain(tiny_config(*fresh))
    emit("resharded", {"tp2": on_tp2.losses, "tp1": on_tp1.losses})
    reset_parallel_state()

    # 5. NaN loss at iteration 3: stop, keep the checkpoint of iteration 2 as it was.
    cfg = tiny_config(*RUN, f"checkpoint.save={w}/n", "checkpoint.save_interval=2")
    good = w / "n" / "iter_0000002" / "metadata.json"
    try:
        pretrain(cfg, forward_step_func=nan_forward_step(3, num_microbatches=4))
        emit("nan", {"raised": False})
    except NonFiniteLossError as err:
        emit(
            "nan",
            {
                "raised": True,
                "message": str(err),
                "latest": checkpointing.latest_iteration(w / "n"),
                "iter3_exists": (w / "n" / "iter_0000003").exists(),
                "good_mtime": good.stat().st_mtime_ns,
            },
        )


if __name__ == "__main__":
    RUN += sys.argv[2:]
    main(sys.argv[1])
