"""The functional tests' fast tier: the smoke set that `pytest -m "not slow" tests` (the README's test
command) keeps. It is the cheapest launches that still run every strategy and parallel dimension once;
tests/functional/conftest.py marks every other functional test `slow` (the full suite, `pytest tests`)."""

from __future__ import annotations

# node id (relative to tests/functional; a file name takes all its tests) -> what it covers, and its launches
SMOKE = {
    "test_parallel_runtime.py::test_tp2_logits_match_tp1_and_moe_ep2_trains_a_step": "TP=2, MoE EP=2 (2 ranks)",
    "test_parallel_runtime.py::test_single_process_without_torchrun": "one rank without torchrun (1 process)",
    "test_parallel_runtime.py::test_env_world_size": "WORLD_SIZE parsing (no launch)",
    "test_cpu_p2p.py": "PP=2 with VPP, batched and unbatched p2p (2 ranks)",
    "test_context_parallel_packed.py": "CP=2 and a finetune (SFT) from a tiny HF Llama (1 + 2 ranks)",
    "test_consolidated_save.py": "fsdp2 and megatron training, consolidated HF save, export CLI (2 + 1 ranks)",
    "test_training_checkpoints.py": "checkpoint save, crash during a save, exact resume (2 + 2 ranks)",
    "test_conversion_parallel.py::test_tp2_round_trip_and_torch_dist_import": (
        "HF -> Megatron TP=2 -> HF round trip of every family (2 ranks)"
    ),
    "test_run_recipe_dry_run.py": "the CLI's dry run (plain processes, no torch)",
    "test_training_parity_hf.py": (
        "training equals transformers + AdamW per iteration: TP=1/2(+SP), PP, DP, CP, fsdp2, EP, SFT, LoRA (1 + 2 ranks)"
    ),
}


def in_smoke_set(nodeid_in_functional: str) -> bool:
    """Whether a test (its node id relative to tests/functional) belongs to the fast tier."""
    return any(_matches(nodeid_in_functional, key) for key in SMOKE)


# CI runs the full suite on two legs (megatron-core 0.16 and 0.19). These slow tests check bridge's own
# process handling (signals, kill -9 during saves, restarts, relaunches, a real SLURM, multi-node logs) and
# the fsdp2 checkpoints (torch DCP shards of a torch-wrapped model; fsdp2's training equivalence stays on
# both legs): what they exercise is bridge's and torch's code, the same on both releases, so CI runs each on
# one leg (the environment variable BRIDGE_CI_LEG names the leg), split to even the legs' time. Both asynchronous-save
# fault tests are kept apart so each release has one (the async writer is Megatron-Core's). Without
# BRIDGE_CI_LEG (a user's `pytest tests`) every test runs.
# node id (as in SMOKE) -> the leg that runs it
ONE_LEG = {
    "test_slurm_launch.py": "py311",
    "test_stop_signals.py": "py311",
    "test_checkpoint_faults.py::test_kill_9_at_seeded_points_of_saves_never_loses_a_checkpoint[sync]": "py311",
    "test_checkpoint_faults.py::test_sigterm_during_an_async_write_finishes_it_and_exits_0": "py311",
    "test_error_line.py": "py311",
    "test_fsdp2_checkpoints.py": "py311",
    "test_multi_node_logging.py": "py312",
    "test_hang_straggler.py": "py312",
    "test_rank_restart.py": "py312",
    "test_checkpoint_faults.py::test_kill_9_at_seeded_points_of_saves_never_loses_a_checkpoint[async]": "py312",
    "test_checkpoint_faults.py::test_sigterm_saves_and_exits_0_and_a_second_run_is_refused": "py312",
    "test_overwrite_relaunch.py": "py312",
    "test_rerun.py": "py312",
}


def _matches(nodeid: str, key: str) -> bool:
    return nodeid == key or nodeid.startswith(key + ("[" if "::" in key else "::"))


def leg_of(nodeid_in_functional: str) -> str | None:
    """The CI leg that runs this test, or None where both do."""
    return next((leg for key, leg in ONE_LEG.items() if _matches(nodeid_in_functional, key)), None)
