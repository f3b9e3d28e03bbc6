"""`bridge run`: torchrun's launcher (same arguments), reporting a failed launch as the rank's one line.

    bridge run --nproc_per_node=4 scripts/training/run_recipe.py --recipe llama32_1b_pretrain_config ...

torchrun ends a failed launch with its own Python traceback and a ~25-line ChildFailedError report.
`bridge run` runs the same launcher (torch.distributed.run: parse_args, run) and, when a rank fails,
prints only the first failed rank's line from torchrun's error file (bridge's entry points write their
`error:` line there: bridge.cli.user_error) and exits with that rank's exit code (a user mistake: 2).
Workers are told (LAUNCHER_ENV) not to print the line themselves, so it appears exactly once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from bridge.cli.user_error import LAUNCHER_ENV, error_line

NO_ERROR_FILE = "<N/A>"  # torchrun's ProcessFailure.error_file of a rank that wrote none
USAGE = "usage: bridge run [torchrun options] SCRIPT [script arguments]  (the options of torchrun --help)"


def failure_line(rank: int, failure: Any) -> str:
    """One line for torchrun's ProcessFailure of global rank `rank`."""
    message = failure.message
    if isinstance(message, dict):  # @record's form: bridge's line, or an exception with its traceback
        message = message.get("message", "")
    if failure.error_file == NO_ERROR_FILE or not isinstance(message, str) or not message:
        return _exit_line(rank, failure)  # no error file: torchrun made the message up
    if message.startswith("error: "):
        return message  # bridge's entry points: already the user's line
    return error_line(f"rank {rank} failed: {message}")


def _exit_line(rank: int, failure: Any) -> str:
    if failure.exitcode < 0:
        return error_line(f"rank {rank} was killed by {failure.signal_name()} (see its output above)")
    return error_line(f"rank {rank} exited with code {failure.exitcode} (see its output above)")


def root_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """The rank to report: the earliest of those that exited by themselves (torchrun's own choice, the
    earliest error file, can be a rank it killed after that rank had recorded the same mistake)."""
    exited = {rank: f for rank, f in failures.items() if f.exitcode > 0}
    pool = exited or failures
    rank = min(pool, key=lambda r: (pool[r].timestamp, r))
    return rank, pool[rank]


def exit_code_of(failure: Any) -> int:
    """The failed rank's exit code; a signal as the shell reports it (128 + the signal number)."""
    if failure.exitcode < 0:
        return 128 + -failure.exitcode
    return failure.exitcode or 1


HELP = f"""{USAGE}

Launches SCRIPT on several processes with torchrun's launcher (torch.distributed.run) and the same
options, e.g.

    bridge run --nproc_per_node=4 scripts/training/run_recipe.py --recipe llama32_1b_pretrain_config

When a rank fails, bridge run prints that rank's one error line (not torchrun's traceback and failure
report) and exits with its exit code (2 for a configuration mistake).

Common torchrun options: --nproc_per_node N (processes on this machine), --nnodes N, --node_rank R,
--master_addr HOST, --master_port PORT, --rdzv_endpoint HOST:PORT. The full list: torchrun --help.
The script's own options: bridge run SCRIPT --help (e.g. run_recipe.py --help).
"""


def asks_for_help(argv: list[str]) -> bool:
    """-h / --help among the launcher's options (before SCRIPT; after it they are the script's)."""
    for word in argv:
        if word in ("-h", "--help"):
            return True
        if not word.startswith("-"):
            return False
    return False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    if asks_for_help(argv):
        print(HELP, end="")
        return 0
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(argv)
    os.environ[LAUNCHER_ENV] = "1"  # the workers inherit the launcher's environment
    # the agent's own lines (closing signals, "failed (exitcode ...)") restate the failure reported below
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    try:
        run(args)
    except ChildFailedError as failed:
        rank, failure = root_failure(failed.failures)
        print(failure_line(rank, failure), file=sys.stderr, flush=True)
        return exit_code_of(failure)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return 0
