"""The `bridge` console script: `bridge <subcommand> ...` (subcommands load lazily, so --help is instant).

An entry point: the package sits above every layer of bridge (and may import recipes); nothing in the
library imports it.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module with main(argv) -> int, one-line help)
SUBCOMMANDS = {
    "plan": ("bridge.cli.plan", "recommend a parallel layout and estimate per-GPU memory (offline)"),
    "launch": (
        "bridge.cli.cluster_launch",
        "render a run for SLURM (sbatch) or Kubernetes (PyTorchJob, JobSet)",
    ),
    "run": ("bridge.cli.launch", "launch like torchrun; a failed launch prints the rank's one error line"),
    "eval": ("bridge.cli.eval", "lm-eval tasks on a bridge model at any TP / PP (lm-eval's task names)"),
    "serve": ("bridge.cli.serve", "an OpenAI-compatible HTTP server over a bridge model at any TP / PP"),
}


def _usage() -> str:
    lines = ["usage: bridge <subcommand> [options]", "", "subcommands:"]
    lines += [f"  {name:<8} {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines.append("\n`bridge <subcommand> --help` for its options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"bridge: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
