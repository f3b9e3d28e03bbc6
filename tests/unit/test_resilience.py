"""Hung-rank and straggler detection, the parts that need no second rank: the config's rules, who the hang
message names from the ranks' reports, the straggler rule, and a one-rank watchdog firing on a stale
heartbeat (its exit replaced). The multi-rank behaviour: tests/functional/test_hang_straggler.py."""

from __future__ import annotations

import threading
import time

import pytest

from bridge.config.overrides import apply_overrides
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.training.stragglers import find_stragglers
from bridge.training.watchdog import HANG_EXIT_CODE, Heartbeat, Report, Watchdog, hang_message
from recipes.llama import llama32_1b_pretrain_config


def _plan(*overrides):
    return build_plan(apply_overrides(llama32_1b_pretrain_config(), list(overrides)), 8, cuda=False)


def test_plan_reads_the_sections_and_is_off_by_default():
    plan = _plan()
    assert plan.hang is None and plan.stragglers is None
    plan = _plan("ft.rank_heartbeat_timeout=300", "ft.initial_rank_heartbeat_timeout=900",
                 "straggler.log_straggler=true", "straggler.report_interval=50")  # fmt: skip
    assert (plan.hang.timeout_s, plan.hang.initial_timeout_s) == (300.0, 900.0)
    assert (plan.stragglers.interval, plan.stragglers.threshold) == (50, 0.7)
    assert _plan("ft.rank_heartbeat_timeout=60").hang.initial_timeout_s == 60.0  # follows the timeout


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["ft.rank_heartbeat_timeout=0"], "ft.rank_heartbeat_timeout = 0"),
        (["ft.rank_heartbeat_timeout=10", "ft.initial_rank_heartbeat_timeout=-1"], "ft.initial_rank_heartbeat_timeout = -1"),
        (["ft.initial_rank_heartbeat_timeout=10"], "ft.initial_rank_heartbeat_timeout = 10"),
        (["straggler.log_straggler=true", "straggler.report_interval=0"], "straggler.report_interval = 0"),
        (["straggler.log_straggler=true", "straggler.relative_perf_threshold=1.5"], "straggler.relative_perf_threshold = 1.5"),
    ],
)  # fmt: skip
def test_bad_values_are_one_error_naming_the_field(overrides, field):
    with pytest.raises(ConfigError) as err:
        _plan(*overrides)
    assert str(err.value).startswith(field) and "Fix:" in str(err.value)


def _report(iteration=7, phase="forward/backward", collective=None, where="train.py:10 in step"):
    return Report(iteration, phase, 12.34, where, collective)


def test_message_names_the_busy_rank_and_groups_the_waiting_ones():
    reports = {0: _report(collective="torch.distributed.all_reduce", where="m.py:3 in f"), 1: _report(),
               2: _report(collective="torch.distributed.all_reduce", where="m.py:3 in f")}  # fmt: skip
    text = hang_message(3, reports, {}, "ft.rank_heartbeat_timeout", 10)
    assert text == (
        "hung rank: rank 1 made no progress for 12.3 s at iteration 7 (last operation: forward/backward, at "
        "train.py:10 in step); ranks 0, 2 wait in torch.distributed.all_reduce at iteration 7 "
        "(forward/backward, at m.py:3 in f). ft.rank_heartbeat_timeout=10 s: stopping the job (exit code 3)"
    )


def test_message_names_a_rank_that_does_not_answer_with_what_it_last_published():
    reports = {0: _report(collective="torch.distributed.broadcast")}
    text = hang_message(2, reports, {1: (5, "optimizer step")}, "ft.initial_rank_heartbeat_timeout", 60)
    assert text.startswith(
        "hung rank: rank 1 does not answer (stopped, dead, or blocked in native code; last heard at "
        "iteration 5 (optimizer step)); rank 0 waits in torch.distributed.broadcast at iteration 7"
    )
    everyone_waits = hang_message(1, {0: _report(collective="an asynchronous collective")}, {}, "t", 1)
    assert "every rank waits in a collective" in everyone_waits


def test_straggler_rule_names_slow_steps_and_slow_readers_not_noise():
    # (step s, data s) per rank; threshold 0.7: a step slower than median / 0.7, or data time over the
    # median's by more than (1 / 0.7 - 1) x the median step
    times = [(1.0, 0.001), (1.0, 0.003), (1.5, 0.0), (1.0, 0.6)]
    found = find_stragglers(times, 0.7)
    assert [(s.rank, s.what) for s in found] == [(2, "step"), (3, "data")]
    assert find_stragglers([(1.0, 0.01), (1.0, 0.02), (1.0, 0.03)], 0.7) == []  # ms of data noise: nobody


def test_watchdog_stops_a_stale_rank_and_leaves_a_beating_one(capsys):
    exits = []
    done = threading.Event()

    def fake_exit(code):
        exits.append(code)
        done.set()

    hb = Heartbeat(4)
    hb.steps_done = 1
    dog = Watchdog(hb, timeout_s=0.5, initial_timeout_s=0.5, rank=0, world=1, exit=fake_exit).start()
    for _ in range(8):  # 0.8 s of beats every 0.1 s: no timeout
        hb.beat("optimizer step", 5)
        time.sleep(0.1)
    assert not exits
    assert done.wait(5)  # no beats now: fires after 0.5 s
    dog.stop()
    assert exits == [HANG_EXIT_CODE]
    err = capsys.readouterr().err
    assert (
        "error: hung rank: rank 0 made no progress for 0." in err
        and "at iteration 5 (last operation: optimizer step" in err
    )
