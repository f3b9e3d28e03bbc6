"""The `train` and `validation` (evaluation) sections: iterations, batch sizes, exit conditions."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from bridge.config import sections as S
from bridge.config.checks.data import split_weights
from bridge.config.checks.rules import positive
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.parallel.layout import ParallelLayout


def check_train(cfg: ConfigContainer, layout: ParallelLayout) -> None:
    t = cfg.train
    positive("train.train_iters", t.train_iters)
    positive("train.global_batch_size", t.global_batch_size)
    positive("train.micro_batch_size", t.micro_batch_size)
    positive("train.exit_interval", t.exit_interval, none_ok=True)
    positive("train.manual_gc_interval", t.manual_gc_interval, zero_ok=True)
    if t.exit_duration_in_mins is not None and not t.exit_duration_in_mins > 0:
        raise config_error(
            "train.exit_duration_in_mins", t.exit_duration_in_mins, "must be > 0 or null", "give minutes"
        )
    if t.exit_signal is not None:
        text = str(t.exit_signal).strip().upper()
        name = text if text.isdigit() or text.startswith("SIG") else "SIG" + text
        valid = (
            int(text) in {s.value for s in signal.Signals}
            if text.isdigit()
            else name in signal.Signals.__members__
        )
        if (
            not valid
            or name in ("SIGKILL", "SIGSTOP")
            or text in (str(signal.SIGKILL.value), str(signal.SIGSTOP.value))
        ):
            raise config_error(
                "train.exit_signal",
                t.exit_signal,
                "must name a signal that can be caught (SIGTERM and SIGINT are always handled)",
                "use a name such as SIGUSR1 or SIGTERM",
            )
    per_step = t.micro_batch_size * layout.dp
    if t.global_batch_size % per_step:
        raise config_error(
            "train.global_batch_size",
            t.global_batch_size,
            f"must be a multiple of train.micro_batch_size ({t.micro_batch_size}) x data-parallel size "
            f"({layout.dp}) = {per_step}",
            f"use a multiple of {per_step} (e.g. {max(per_step, t.global_batch_size // per_step * per_step)}), "
            "or change micro_batch_size / the layout",
        )


def check_evaluation(cfg: ConfigContainer) -> None:
    v = cfg.validation
    positive("validation.eval_interval", v.eval_interval, zero_ok=True, none_ok=True)
    positive("validation.eval_iters", v.eval_iters, zero_ok=True)
    if v.eval_interval and v.eval_iters == 0:
        raise config_error(
            "validation.eval_iters",
            0,
            f"evaluation runs every {v.eval_interval} iterations but on no batches",
            "set validation.eval_iters > 0, or validation.eval_interval=0 to never evaluate",
        )
    if v.eval_interval and v.eval_iters and cfg.dataset.kind not in S.GENERATED_DATA_KINDS:
        weights = split_weights(cfg.dataset.split)
        if len(weights) < 2 or weights[1] == 0:
            raise config_error(
                "dataset.split",
                cfg.dataset.split,
                "evaluation is on but the split gives no validation data",
                "give the validation part a weight (e.g. 969,30,1), or set validation.eval_interval=0",
            )
