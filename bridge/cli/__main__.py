"""`python -m bridge.cli <subcommand> ...`, the same as the console script `bridge`."""

import sys

from bridge.cli import main

sys.exit(main())
