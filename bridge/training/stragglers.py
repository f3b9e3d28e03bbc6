"""Straggler detection (straggler.log_straggler): every straggler.report_interval iterations each rank's step
time and data-loading time over the interval are gathered (one all_gather of two numbers per rank), and the
ranks slower than the median by the threshold are named in the log and in TensorBoard / W&B.

Scores follow NVIDIA Resiliency Extension's relative performance: the median's time / the rank's time, below
straggler.relative_perf_threshold a rank is named. Step times include the waits in collectives, so in
synchronous training a rank slow in its own compute makes every rank's step slow alike: the step time
names ranks slow outside the step's collectives (its optimizer step, its logging). Data loading is each
rank's own time, and it delays every rank's step: a rank is named for it when its data time exceeds the
median's by more than the same share of the median step time (1 / threshold - 1: 43 % at 0.7), so
milliseconds of noise on a fast loader name nobody.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from bridge.config.resilience import StragglerPlan
from bridge.training.logging import logger


@dataclass(frozen=True)
class Straggler:
    rank: int
    what: str  # "step" or "data"
    seconds: float  # its time over the interval
    median: float  # the median rank's


def find_stragglers(times: list[tuple[float, float]], threshold: float) -> list[Straggler]:
    """The stragglers among the ranks' (step seconds, data seconds) over one interval."""
    steps = [t[0] for t in times]
    datas = [t[1] for t in times]
    step_median, data_median = statistics.median(steps), statistics.median(datas)
    found = []
    for rank, (step, data) in enumerate(times):
        if step > 0 and step_median / step < threshold:
            found.append(Straggler(rank, "step", step, step_median))
        if data - data_median > (1 / threshold - 1) * step_median:
            found.append(Straggler(rank, "data", data, data_median))
    return found


def describe(found: list[Straggler], iteration: int, interval: int, threshold: float) -> str:
    named = ", ".join(f"rank {s.rank} ({s.what} {s.seconds:.3f} s vs median {s.median:.3f} s)" for s in found)
    return (
        f"stragglers over iterations {iteration - interval + 1}-{iteration}: {named} "
        f"(straggler.relative_perf_threshold={threshold:g})"
    )


class StragglerDetector:
    """Sums the step times between reports; `maybe_report` gathers and names (every rank calls it)."""

    def __init__(self, plan: StragglerPlan, heartbeat, writers, is_log_rank: bool):
        self.plan, self.heartbeat, self.writers, self.is_log_rank = plan, heartbeat, writers, is_log_rank
        self.step_seconds = 0.0
        heartbeat.reset_data_time()

    def record_step(self, seconds: float) -> None:
        self.step_seconds += seconds

    def maybe_report(self, iteration: int) -> list[Straggler] | None:
        """At every interval's end: the stragglers (logged on the logging rank), else None."""
        if iteration % self.plan.interval:
            return None
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
        mine = torch.tensor([self.step_seconds, self.heartbeat.reset_data_time()], dtype=torch.float64,
                            device=device)  # fmt: skip
        self.step_seconds = 0.0
        gathered = [torch.zeros_like(mine) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(gathered, mine)
        times = [(float(t[0]), float(t[1])) for t in gathered]
        found = find_stragglers(times, self.plan.threshold)
        if self.is_log_rank:
            if found:
                logger.warning(describe(found, iteration, self.plan.interval, self.plan.threshold))
            step_median = statistics.median(t[0] for t in times)
            scalars = {"stragglers/count": float(len({s.rank for s in found}))}
            for rank, (step, data) in enumerate(times):  # relative performance per rank, 1 = the median
                scalars[f"stragglers/relative-perf-step/rank{rank}"] = step_median / step if step else 1.0
                scalars[f"stragglers/data-seconds/rank{rank}"] = data
            self.writers.write(iteration, scalars)
        return found
