"""The run's resilience decisions (pure data): hung-rank detection (the `ft` section) and straggler detection
(the `straggler` section), validated here and read by bridge/training/watchdog.py and
bridge/training/stragglers.py. No torch import."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer


@dataclass(frozen=True)
class HangPlan:
    timeout_s: float  # ft.rank_heartbeat_timeout
    initial_timeout_s: float  # the first iteration's (ft.initial_rank_heartbeat_timeout, or timeout_s)

    def describe(self) -> str:
        first = (
            f" ({self.initial_timeout_s:g} s for the first iteration)"
            if self.initial_timeout_s != self.timeout_s
            else ""
        )
        return f"hung ranks: a rank without progress for {self.timeout_s:g} s{first} stops the job"


@dataclass(frozen=True)
class StragglerPlan:
    interval: int  # iterations between reports
    threshold: float  # relative performance (median time / rank time) below which a rank is named

    def describe(self) -> str:
        excess = 1 / self.threshold - 1
        return (
            f"stragglers: every {self.interval} iterations, ranks whose step time exceeds {1 + excess:.2f} x the "
            f"median, or whose data time exceeds the median's by {100 * excess:.0f} % of the median step, are named"
        )


def _positive_seconds(field: str, value) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise config_error(
            f"ft.{field}",
            value,
            "it is a number of seconds a rank may go without progress, and must be > 0",
            f"set ft.{field} to the longest a step phase (a checkpoint save, an evaluation) may take, "
            "e.g. 600, or null to turn hung-rank detection off",
        )
    return float(value)


def hang_plan(cfg: ConfigContainer) -> HangPlan | None:
    """ft.rank_heartbeat_timeout set: the detection's timeouts; None: no detection."""
    ft = cfg.ft
    if ft.rank_heartbeat_timeout is None:
        if ft.initial_rank_heartbeat_timeout is not None:
            raise config_error(
                "ft.initial_rank_heartbeat_timeout",
                ft.initial_rank_heartbeat_timeout,
                "it is the first iteration's timeout of hung-rank detection, which is off "
                "(ft.rank_heartbeat_timeout is null)",
                "set ft.rank_heartbeat_timeout too (seconds), or drop ft.initial_rank_heartbeat_timeout",
            )
        return None
    timeout = _positive_seconds("rank_heartbeat_timeout", ft.rank_heartbeat_timeout)
    initial = ft.initial_rank_heartbeat_timeout
    initial = timeout if initial is None else _positive_seconds("initial_rank_heartbeat_timeout", initial)
    return HangPlan(timeout_s=timeout, initial_timeout_s=initial)


def straggler_plan(cfg: ConfigContainer) -> StragglerPlan | None:
    """straggler.log_straggler on: the report's interval and threshold; None: off."""
    s = cfg.straggler
    if not s.log_straggler:
        return None
    if not isinstance(s.report_interval, int) or isinstance(s.report_interval, bool) or s.report_interval < 1:
        raise config_error(
            "straggler.report_interval",
            s.report_interval,
            "it is the number of iterations between straggler reports and must be an integer >= 1",
            "set straggler.report_interval=100 (or any positive number of iterations)",
        )
    t = s.relative_perf_threshold
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t <= 1:
        raise config_error(
            "straggler.relative_perf_threshold",
            t,
            "a rank is named when the median's time / its time falls below it: it must be in (0, 1]",
            "set straggler.relative_perf_threshold=0.7 (names ranks slower than 1.43 x the median)",
        )
    return StragglerPlan(interval=s.report_interval, threshold=float(t))
