"""Report a user mistake once, as one `error:` line, and exit 2: plain python, torchrun and `bridge run`.

Under torchrun every rank finds the same mistake (validation is pure Python, before any process group),
and the first rank to exit makes torchrun kill the others. So each failing rank
- writes the line to torchrun's error file (`TORCHELASTIC_ERROR_FILE`, the file `@record` writes):
  torchrun's failure summary then shows it as the root cause instead of "To enable traceback see ...";
- prints it to stderr only if it is the first rank of this launch on this node to fail (an exclusive
  marker file beside the ranks' error folders), so the line is printed once, on top, whichever rank wins;
- under `bridge run` (LAUNCHER_ENV set) prints nothing: the launcher prints the failed rank's line.
Without torchrun (plain python, or another launcher) rank 0 prints.

A mistake is deterministic: a restart (torchrun's `--max-restarts`) would find it again, and a NaN stop
would retrain from the last checkpoint into the same NaN. So a failing rank that torchrun may restart also
records the line beside the agent's attempt folders (`<agent dir>/attempt_N/<local rank>/error.json` is the
error file; the agent dir is the same for every attempt of one torchrun and new for the next torchrun), and
a restarted attempt that finds it stops at once, before any work, saying so (`previous_stop`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

EXIT_USER_ERROR = 2
# set by `bridge run` for its workers: the launcher reports the failed rank's line itself
LAUNCHER_ENV = "BRIDGE_RUN_LAUNCHER"
_PRINTED_MARKER = "bridge-error-printed"
_STOPPED_MARKER = "bridge-deterministic-stop"


def error_line(error: BaseException | str) -> str:
    """`error: <message>` on one line (a message's own line breaks become spaces)."""
    return "error: " + " ".join(str(error).split())


def report_user_error(error: BaseException | str, exit_code: int = EXIT_USER_ERROR) -> int:
    """Record and print (once per launch) the user mistake; returns the exit status to exit with."""
    line = error_line(error)
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE") or None
    if error_file is not None:
        _write_error_file(Path(error_file), line)
        if exit_code == EXIT_USER_ERROR and _restarts_left() > 0:
            try:  # the first attempt's line stays (a later attempt's "not retried" does not replace it)
                with open(Path(error_file).parents[2] / _STOPPED_MARKER, "x") as marker:
                    marker.write(line)
            except OSError:  # there already, or unwritable: a restart then repeats the mistake
                pass
    if _prints_here(error_file):
        print(line, file=sys.stderr, flush=True)
    return exit_code


def _restarts_left() -> int:
    def count(name: str) -> int:
        try:
            return int(os.environ.get(name, "0"))
        except ValueError:
            return 0

    return count("TORCHELASTIC_MAX_RESTARTS") - count("TORCHELASTIC_RESTART_COUNT")


def previous_stop() -> str | None:
    """In a restarted torchrun attempt: the `error:` line an earlier attempt of this torchrun stopped with
    (a mistake or a NaN stop, which the restart would repeat); else None."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not error_file or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") in ("", "0"):
        return None
    try:
        return (Path(error_file).parents[2] / _STOPPED_MARKER).read_text().strip() or None
    except (OSError, IndexError):
        return None


def _write_error_file(path: Path, line: str) -> None:
    # @record's form; the summary shows "py_callstack", which for a user mistake is the line itself (it
    # has no traceback). torchrun warns about the shorter {"message": str} form, so that one is not used.
    info = {"py_callstack": line, "timestamp": str(int(time.time()))}
    data = {"message": {"message": line, "extraInfo": info}}
    try:
        path.write_text(json.dumps(data))
    except OSError:  # the line is still printed; a launcher without the file shows the exit code
        pass


def _prints_here(error_file: str | None) -> bool:
    if os.environ.get(LAUNCHER_ENV):
        return False
    if error_file is None:
        return os.environ.get("RANK", "0") == "0"
    # torchrun's layout: <attempt dir>/<local rank>/error.json; the attempt dir is shared by this
    # node's ranks and new for every launch, so the first rank to create the marker prints
    marker = Path(error_file).parent.parent / _PRINTED_MARKER
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        return os.environ.get("RANK", "0") == "0"
    return True
