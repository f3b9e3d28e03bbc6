"""Several workers in one launch: each rank runs the cases one after the other, instead of one launch per
worker (its start and rendezvous; under real torchrun also 5-10 s of imports per rank).

A case is a worker script of this folder with its arguments, run as `__main__` with that argv, exactly
as when launched alone; every worker tears its process groups down before it ends, so the next case
starts from none. Each case's output (file descriptors 1 and 2, so C-level and logging output too) goes
to WORKDIR/<case id>.rank<r>.log, so a test reads a case's output as if the worker had been launched
alone (tests/functional/conftest.py's `bundled` fixture). A failing case prints its log's tail to the
launch's output and ends the launch.

usage: bundle.py WORKDIR CASES_JSON, CASES_JSON a list of {"id": ..., "argv": [script, args...]}"""

from __future__ import annotations

import faulthandler
import json
import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_case(log: Path, argv: list[str]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    failed = True
    sys.argv = [str(HERE / argv[0]), *argv[1:]]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
        failed = False
    except SystemExit as exit_:  # a worker that ends with sys.exit(0) succeeded
        failed = exit_.code not in (0, None)
        if failed:
            raise
    finally:
        # a case's hang timer (runtime_common's faulthandler.dump_traceback_later) is for that case: left
        # running, it killed a later, longer case of the same launch
        faulthandler.cancel_dump_traceback_later()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        if failed:  # what the case said before the traceback that follows
            sys.stderr.write(f"--- {log} (tail) ---\n{log.read_text(errors='replace')[-6000:]}\n")
            sys.stderr.flush()


def main(workdir: str, cases: list[dict]) -> None:
    rank = os.environ.get("RANK", "0")
    for case in cases:
        run_case(Path(workdir) / f"{case['id']}.rank{rank}.log", case["argv"])


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
