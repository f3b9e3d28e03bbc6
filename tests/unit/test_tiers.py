"""The fast tier's smoke set (tests/functional/tiers.py) names tests that exist, and still covers every
strategy and parallel dimension once: a renamed test would otherwise leave the fast tier silently."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.functional.tiers import ONE_LEG, SMOKE, in_smoke_set, leg_of

FUNCTIONAL = Path(__file__).resolve().parents[1] / "functional"


@pytest.mark.parametrize("key", sorted(SMOKE) + sorted(ONE_LEG))
def test_each_smoke_and_one_leg_entry_names_an_existing_test(key):
    file, _, name = key.partition("::")
    name = name.partition("[")[0]
    path = FUNCTIONAL / file
    assert path.is_file(), key
    if name:
        defined = {
            node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)
        }
        assert name in defined, key


def test_the_smoke_set_covers_every_strategy_and_dimension():
    covered = " ".join(SMOKE.values())
    for what in (
        "TP=2",
        "PP=2",
        "CP=2",
        "EP=2",
        "fsdp2",
        "checkpoint save",
        "resume",
        "round trip",
        "finetune",
    ):
        assert what in covered, what


def test_node_ids_match_whole_files_and_whole_tests():
    assert in_smoke_set("test_cpu_p2p.py::test_batched_p2p_gives_the_unbatched_losses_and_grads")
    assert in_smoke_set("test_run_recipe_dry_run.py::test_seed_invalid_combinations_exit_2[tp-3]")
    assert in_smoke_set("test_parallel_runtime.py::test_env_world_size")
    assert not in_smoke_set("test_parallel_runtime.py::test_tp2_pp2_sequence_parallel_matches_pp1")
    assert not in_smoke_set("test_parallel_runtime.py::test_env_world_size_more")
    assert not in_smoke_set("test_cpu_p2p.py.bak::test_x")
    assert not in_smoke_set("test_fsdp2.py::test_defer_fsdp_grad_sync_reduces_once_per_step")


def test_one_leg_tests_are_slow_and_split_between_the_two_legs():
    assert set(ONE_LEG.values()) == {"py311", "py312"}
    assert not any(in_smoke_set(key) for key in ONE_LEG)  # the fast tier runs on both legs
    sync = "test_checkpoint_faults.py::test_kill_9_at_seeded_points_of_saves_never_loses_a_checkpoint[sync]"
    assert leg_of(sync) == "py311" and leg_of(sync.replace("[sync]", "[async]")) == "py312"
    assert leg_of("test_slurm_launch.py::test_two_rank_job_runs_and_a_cancelled_job_resumes") == "py311"
    assert leg_of("test_checkpoint_faults.py::test_exact_resume_with_dropout") is None
