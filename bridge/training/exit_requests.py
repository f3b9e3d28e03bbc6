"""Stopping a run cleanly: SIGTERM, SIGINT and train.exit_signal, and train.exit_duration_in_mins."""

from __future__ import annotations

import signal
import threading
import time

import torch

from bridge.checkpoint import writer_processes
from bridge.parallel import parent_death


class ExitRequests:
    """SIGTERM, SIGINT and train.exit_signal set a flag (the step in progress finishes); the loop asks
    every iteration whether any rank got one, or train.exit_duration_in_mins has passed, and then
    saves and returns. A second SIGINT interrupts at once (KeyboardInterrupt).

    While the loop runs, the processes the rank forks (checkpoint writers) ignore these signals: they
    reach the whole process group, and the save they would break is the one the signal asks for
    (bridge.checkpoint.writer_processes). Under torchrun the rank gets SIGTERM when torchrun dies (a
    repeated signal ends torchrun's own shutdown early, a signal torchrun does not handle kills it):
    the rank then saves and exits like for any stop instead of training on without its launcher."""

    def __init__(self, train_cfg):
        self.received: str | None = None
        self.started = time.monotonic()
        self.duration_s = (train_cfg.exit_duration_in_mins or 0) * 60.0
        self._previous: dict = {}
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be installed from the main thread
        wanted = {signal.SIGTERM, signal.SIGINT}
        if train_cfg.exit_signal:
            wanted.add(signal_number(train_cfg.exit_signal))
        for sig in wanted:
            self._previous[sig] = signal.signal(sig, self._handle)
        writer_processes.set_stop_signals(wanted)
        if parent_death.launched_by_torchrun() and not parent_death.signal_on_parent_death(signal.SIGTERM):
            self.received = "SIGTERM"  # torchrun is already gone

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.received == name and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._previous:
            writer_processes.set_stop_signals(())
        self._previous = {}

    def poll(self) -> str | None:
        """The reason to stop now (the same on every rank), or None."""
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"

        code = float(signal.Signals[self.received].value) if self.received else 0.0
        late = 1.0 if self.duration_s and time.monotonic() - self.started >= self.duration_s else 0.0
        t = torch.tensor([code, late], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        if t[0].item():
            return f"received {signal.Signals(int(t[0].item())).name}"
        if t[1].item():
            return f"train.exit_duration_in_mins={self.duration_s / 60:g} reached"
        return None


def signal_number(value) -> int:
    text = str(value).strip().upper()
    if text.isdigit():
        return int(text)
    return int(signal.Signals[text if text.startswith("SIG") else "SIG" + text])
