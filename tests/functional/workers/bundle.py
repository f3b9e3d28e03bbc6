"""Several workers in one launch: each rank imports Megatron-Core once and runs the cases one after the
other, instead of one torchrun (and its 7-10 s of imports per rank) per worker.

A CASE is a worker module of this folder with a main() that takes no arguments and tears its process
groups down before it returns (as every worker does when launched alone). Each case's output (file
descriptors 1 and 2, so C-level and logging output too) goes to WORKDIR/<case>.rank<r>.log, so a test
reads a case's output as if the worker had been launched alone (tests/functional/conftest.py's
`bundled` fixture). A failing case prints its log's tail to the launch's output and ends the launch.

usage: bundle.py WORKDIR CASE[,CASE...]"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path


def run_case(workdir: Path, case: str, rank: str) -> None:
    log = workdir / f"{case}.rank{rank}.log"
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    failed = False
    try:
        importlib.import_module(case).main()
    except BaseException:
        failed = True
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        if failed:  # what the case said before the traceback that follows
            sys.stderr.write(f"--- {log} (tail) ---\n{log.read_text(errors='replace')[-6000:]}\n")
            sys.stderr.flush()


def main(workdir: str, cases: list[str]) -> None:
    rank = os.environ.get("RANK", "0")
    for case in cases:
        run_case(Path(workdir), case, rank)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
