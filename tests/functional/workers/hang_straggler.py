"""3 gloo ranks (DP=3) under torchrun (the test starts it) with hung-rank and straggler detection on.
`faults`: rank 0 reads its data slowly over iterations 1-4 (a straggler); rank 1 sleeps inside the forward
pass of iteration 7 (a hung rank). `plain`: 6 iterations with the slow reader but no hang (TensorBoard on),
then again with both detections off and no slow reader: the losses must not change."""

from __future__ import annotations

import json
import os
import sys
import time

from train_common import reset_parallel_state, tiny_config, write_line

RUN = ["train.global_batch_size=6", "straggler.report_interval=2"]
HANG_TIMEOUT = 8.0
SLOW_DATA_S, SLOW_STEPS, HANG_ITERATION = 0.3, 4, 7


def record(tag: str, payload) -> None:
    write_line(f"@@{tag} {json.dumps(payload)}")


class _SlowReads:
    def __init__(self, inner):
        self.inner, self.reads = inner, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.reads += 1
        if self.reads <= 2 * SLOW_STEPS:  # 2 micro batches per step
            time.sleep(SLOW_DATA_S)
        return next(self.inner)


def main(workdir: str, mode: str) -> None:
    from bridge.training import pretrain
    from bridge.training.forward_step import forward_step

    pretrain_module = sys.modules["bridge.training.pretrain"]
    build = pretrain_module.build_iterator
    rank = int(os.environ["RANK"])
    if rank == 0:  # the slow reader (its data unchanged)
        pretrain_module.build_iterator = lambda *a, **k: _SlowReads(build(*a, **k))
    detect = [
        f"ft.rank_heartbeat_timeout={HANG_TIMEOUT}",
        "ft.initial_rank_heartbeat_timeout=120",
        "straggler.log_straggler=true",
    ]
    if mode == "plain":
        on = pretrain(
            tiny_config("train.train_iters=6", *RUN, *detect, f"logger.tensorboard_dir={workdir}/tb")
        )
        reset_parallel_state()
        pretrain_module.build_iterator = build
        off = pretrain(tiny_config("train.train_iters=6", *RUN))
        record("losses", {"rank": rank, "on": on.losses, "off": off.losses, "stragglers": on.stragglers})
        return
    calls = []

    def sleepy_forward_step(data_iterator, model):
        calls.append(1)
        if rank == 1 and (len(calls) + 1) // 2 == HANG_ITERATION:  # 2 micro batches per step
            record("sleeping", {"rank": rank, "at": time.time()})
            time.sleep(600)
        return forward_step(data_iterator, model)

    result = pretrain(
        tiny_config("train.train_iters=20", *RUN, *detect), forward_step_func=sleepy_forward_step
    )
    record("finished", {"rank": rank, "iteration": result.iteration})  # never: the job stops at iteration 7


if __name__ == "__main__":
    main(*sys.argv[1:])
