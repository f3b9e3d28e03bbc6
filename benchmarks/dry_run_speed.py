"""Wall time of `run_recipe.py --dry-run` (the issue's done-when command) against `python -c pass`.

    python benchmarks/dry_run_speed.py [--runs 7]

Prints the median, min and max of each over the same number of runs, measured back to back in this
process (so machine load affects both alike). Target: the dry run under 1.5 s wall, startup included.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DRY_RUN = [
    str(REPO_ROOT / "scripts" / "training" / "run_recipe.py"),
    "--recipe",
    "llama32_1b_pretrain_config",
    "--dry-run",
    "--world-size",
    "4",
    "model.tensor_model_parallel_size=2",
    "model.pipeline_model_parallel_size=2",
    "model.sequence_parallel=True",
]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall_times(args: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) per run; CPU time shows the work when the machine is shared."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu, start = children_cpu(), time.perf_counter()
        subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL, cwd=REPO_ROOT)
        walls.append(time.perf_counter() - start)
        cpus.append(children_cpu() - cpu)
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    wall_times(DRY_RUN, 1)  # warm the file cache once
    rows = [
        ("python -c pass", *wall_times(["-c", "pass"], runs)),
        ("run_recipe.py --dry-run", *wall_times(DRY_RUN, runs)),
    ]
    print(f"{'command':<26}{'wall median s':>14}{'min s':>8}{'max s':>8}{'cpu median s':>14}   ({runs} runs)")
    for name, walls, cpus in rows:
        print(
            f"{name:<26}{statistics.median(walls):>14.3f}{min(walls):>8.3f}{max(walls):>8.3f}{statistics.median(cpus):>14.3f}"
        )
    extra = statistics.median(rows[1][1]) - statistics.median(rows[0][1])
    print(
        f"dry run over interpreter start: {extra:.3f} s wall; target < 1.5 s wall in total "
        f"({os.getloadavg()[0]:.1f} load average now: wall times grow with load, CPU times much less)"
    )


if __name__ == "__main__":
    main()
