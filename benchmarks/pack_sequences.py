"""Sequence packing speed and fill: bridge's best-fit decreasing packer vs a plain first-fit baseline.

    python benchmarks/pack_sequences.py [--samples 100000] [--size 4096] [--baseline-samples 10000]

Sample lengths are synthetic (lognormal, median --median tokens, clipped to 1..--size), what
bridge.training.data.packing packs (a sample's token count). The baseline is first-fit over a Python list
of the rows' free space, samples in file order: O(samples x rows), so it runs on the first
--baseline-samples samples, and its time for all of them is extrapolated quadratically (rows grow with
the samples); that row is labelled as extrapolated. Prints a markdown table; best of --repeats runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.training.data.packing import pack_lengths  # noqa: E402


def first_fit(lengths: list[int], size: int) -> list[list[int]]:
    """The baseline: each sample into the first row with room, scanning every open row."""
    free: list[int] = []
    rows: list[list[int]] = []
    for i, length in enumerate(lengths):
        for r, space in enumerate(free):
            if space >= length:
                free[r] -= length
                rows[r].append(i)
                break
        else:
            free.append(size - length)
            rows.append([i])
    return rows


def timed(fn, repeats: int) -> tuple[float, list[list[int]]]:
    best, rows = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        rows = fn()
        best = min(best, time.perf_counter() - start)
    return best, rows


def fill(lengths: np.ndarray, rows: list[list[int]], size: int) -> float:
    assert sorted(i for row in rows for i in row) == list(range(len(lengths))), "a sample lost or repeated"
    assert max(int(lengths[row].sum()) for row in rows) <= size, "a row over the size"
    return float(lengths.sum()) / (len(rows) * size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=4096, help="packed_sequence_size N")
    ap.add_argument("--median", type=float, default=400.0, help="median sample length in tokens")
    ap.add_argument("--sigma", type=float, default=1.0, help="lognormal sigma of the lengths")
    ap.add_argument("--baseline-samples", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    raw = rng.lognormal(np.log(args.median), args.sigma, size=args.samples)
    lengths = np.clip(raw.astype(np.int64), 1, args.size)
    sub = lengths[: args.baseline_samples]
    n, m = len(lengths), len(sub)

    table = []  # (packer, samples, seconds, rows, fill, note)
    t, rows = timed(lambda: pack_lengths(lengths, args.size, args.seed), args.repeats)
    table.append(("bridge best-fit decreasing", n, t, len(rows), fill(lengths, rows, args.size), "measured"))
    t, rows = timed(lambda: pack_lengths(sub, args.size, args.seed), args.repeats)
    table.append(("bridge best-fit decreasing", m, t, len(rows), fill(sub, rows, args.size), "measured"))
    sub_list = sub.tolist()
    t_base, rows = timed(lambda: first_fit(sub_list, args.size), 1)
    table.append(
        ("baseline first-fit, list of rows", m, t_base, len(rows), fill(sub, rows, args.size), "measured")
    )
    if n > m:
        t_all = t_base * (n / m) ** 2
        note = f"extrapolated: {t_base:.2f} s x ({n}/{m})^2, rows ~ samples"
        table.append(("baseline first-fit, list of rows", n, t_all, None, None, note))

    print(f"lengths: lognormal median {args.median:g}, sigma {args.sigma:g}, clipped to 1..{args.size}; "
          f"mean {lengths.mean():.0f} tokens; N = {args.size}; best of {args.repeats}")  # fmt: skip
    print()
    print("| packer | samples | time (s) | samples/s | rows | fill | |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, count, secs, nrows, ratio, note in table:
        r = "" if nrows is None else str(nrows)
        f = "" if ratio is None else f"{ratio:.2%}"
        print(f"| {name} | {count} | {secs:.3f} | {count / secs:,.0f} | {r} | {f} | {note} |")
    load = os.getloadavg()[0]
    print()
    print(f"(load average {load:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
