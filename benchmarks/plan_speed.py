"""Wall and CPU time of `python -m bridge.cli.plan` (the `bridge plan` subcommand) for a few models (the target: well under 1 s wall).

    python benchmarks/plan_speed.py [--repeats 5]

Prints a table of medians. Each run is a fresh process, as a user would run it.
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

REPO = Path(__file__).resolve().parents[1]
CASES = [
    ("recipe", ["--model", "llama31_70b_pretrain_config", "--gpus", "64", "--json"]),
    ("preset", ["--model", "mixtral_8x7b", "--gpus", "64", "--json"]),
    ("nothing fits (advice search)", ["--model", "llama31_70b", "--gpus", "8", "--json"]),
]


def run_once(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, "-m", "bridge.cli.plan", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"{'case':<30} {'wall s (median)':>16} {'cpu s (median)':>15}")
    for name, argv in CASES:
        runs = [run_once(argv) for _ in range(args.repeats)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{name:<30} {wall:>16.3f} {cpu:>15.3f}")
    load = os.getloadavg()[0]
    print(f"(load average {load:.1f} on {os.cpu_count()} cores: wall includes waiting for a core)")


if __name__ == "__main__":
    main()
