"""2 ranks: train (saving every 2 iterations) until a stop signal, sent by rank 0 at a fixed point of the
run to its launcher, as a scheduler or a user would send it (test_stop_signals.py reads the outcome).

    python stop_signals.py <workdir> <case>

cases (the signal is sent once the periodic saves at 2 (and 4) exist):
    sigterm_in_save    SIGTERM to torchrun while the periodic save of iteration 4 is being written
    sigint_group       SIGINT to torchrun's process group (Ctrl-C in its terminal) during step 5
    double_sigterm     SIGTERM to torchrun during step 5, and again while torchrun shuts down
    usr1_forwarded     train.exit_signal=SIGUSR1 sent to torchrun, which forwards it (the test lists it
                       in TORCHELASTIC_SIGNALS_TO_HANDLE) during step 5
    usr1_kills_torchrun  the same signal to a torchrun that does not handle it: torchrun dies at once
"""

from __future__ import annotations

import os
import signal
import sys
import time

from train_common import tiny_config, write_line

MICROBATCHES_PER_STEP = 4  # global batch 8 = micro batch 1 x 2 data-parallel ranks x 4
RECEIVED: list[int] = []  # the stop signals this rank's handler got


def _record_received_signals() -> None:
    """Note each stop signal bridge's handler gets, so the sender can wait for its own."""
    from bridge.training.exit_requests import ExitRequests

    handle = ExitRequests._handle

    def recording(self, signum, frame):
        RECEIVED.append(signum)
        return handle(self, signum, frame)

    ExitRequests._handle = recording


def _wait_until_received(timeout: float = 120.0) -> None:
    """Hold the step in flight until this rank got the signal (a loaded machine may schedule torchrun's
    forwarding, or its death, late): the stop must land on that step, as the test expects. The handler
    runs in this thread between the sleeps; every rank's poll then agrees on the stop (MAX all-reduce)."""
    deadline = time.monotonic() + timeout
    while not RECEIVED and time.monotonic() < deadline:
        time.sleep(0.02)


def _send(case: str) -> None:
    launcher = os.getppid()
    write_line(f"@@sent {case}")
    if case in ("sigterm_in_save", "double_sigterm"):
        os.kill(launcher, signal.SIGTERM)
    elif case == "sigint_group":
        os.killpg(os.getpgid(launcher), signal.SIGINT)
    else:
        os.kill(launcher, signal.SIGUSR1)
    if case == "double_sigterm":
        time.sleep(1.0)  # torchrun is now waiting for its ranks to exit
        os.kill(launcher, signal.SIGTERM)
    _wait_until_received()


def main(workdir: str, case: str) -> None:
    from bridge import checkpoint
    from bridge.training import pretrain
    from bridge.training.forward_step import forward_step

    sender = os.environ["RANK"] == "0"
    calls = {"forward": 0}

    def in_save(stage, folder, iteration):
        if sender and case == "sigterm_in_save" and stage == "staging_created" and iteration == 4:
            _send(case)

    def counting_forward_step(data_iterator, model):
        if sender and case != "sigterm_in_save" and calls["forward"] == 4 * MICROBATCHES_PER_STEP:
            _send(case)  # the first micro batch of step 5
        calls["forward"] += 1
        return forward_step(data_iterator, model)

    checkpoint.SAVE_STAGE_HOOKS.append(in_save)
    _record_received_signals()
    exit_signal = ["train.exit_signal=SIGUSR1"] if case.startswith("usr1") else []
    result = pretrain(
        tiny_config(
            "train.train_iters=100000",
            f"checkpoint.save={workdir}/ck",
            "checkpoint.save_interval=2",
            *exit_signal,
        ),
        counting_forward_step,
    )
    write_line(f"@@done {os.environ['RANK']} {result.iteration} {result.exit_reason}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
