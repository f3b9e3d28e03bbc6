"""The frame of a command that loads a model onto ranks (`bridge eval`, `bridge serve`).

Both check their arguments, run, turn a user's mistake into one error line and always tear the process
groups down, so a failed rank never leaves the others waiting.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from bridge.cli.user_error import report_user_error
from bridge.errors import ConfigError
from bridge.parallel.runtime import destroy_distributed, set_verbosity


def run_model_command(
    args: argparse.Namespace,
    check: Callable[[argparse.Namespace], None],
    run: Callable[[argparse.Namespace], object],
) -> int:
    set_verbosity(False)
    try:
        check(args)
        run(args)
    except ConfigError as err:
        return report_user_error(err)
    finally:
        destroy_distributed()
    return 0
