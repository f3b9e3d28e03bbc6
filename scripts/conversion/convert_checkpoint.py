"""Convert between Hugging Face folders and Megatron torch_dist checkpoints.

    python scripts/conversion/convert_checkpoint.py import --hf-path HF --megatron-path OUT [--tp 2 --pp 1 --ep 1]
    torchrun --nproc_per_node=2 scripts/conversion/convert_checkpoint.py export --megatron-path CKPT \
        --hf-path OUT --pp 2

--tp/--pp/--ep choose the layout the conversion runs with (their product times the data-parallel
size is the number of processes); a torch_dist checkpoint loads under any layout afterwards. Export
reads the HF config recorded by import (CKPT/hf_assets) unless --hf-config names another folder.
--low-memory (one process, TP = PP = EP = 1) streams the conversion one tensor at a time
(bridge.conversion.streaming): for checkpoints larger than the machine's memory.
Invalid input, and a target that cannot be written (no permission, a full disk), exits 2 with one
`error:` line on stderr (once under torchrun too: bridge.cli.user_error); no partial output is left (the
result is published by renaming a hidden staging folder, which a failure removes and a later run
removes if the process was killed).
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
import time
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from bridge.cli.user_error import EXIT_USER_ERROR, report_user_error  # noqa: E402
from bridge.errors import ConfigError  # noqa: E402

EXIT_INVALID = EXIT_USER_ERROR
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def shard_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive size like 5GB, 500MB or 1000000")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive integer")
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Hugging Face <-> Megatron torch_dist checkpoint conversion."
    )
    sub = parser.add_subparsers(dest="direction", required=True)
    imp = sub.add_parser("import", help="HF folder -> Megatron torch_dist checkpoint")
    exp = sub.add_parser("export", help="Megatron torch_dist checkpoint -> HF folder")
    for p in (imp, exp):
        p.add_argument("--hf-path", required=True, help="HF folder (read by import, written by export)")
        p.add_argument(
            "--megatron-path", required=True, help="checkpoint root (written by import, read by export)"
        )
        p.add_argument("--tp", type=positive, default=1, help="tensor-parallel size of the conversion")
        p.add_argument("--pp", type=positive, default=1, help="pipeline-parallel size of the conversion")
        p.add_argument("--ep", type=positive, default=1, help="expert-parallel size of the conversion")
        p.add_argument("-v", "--verbose", action="store_true", help="detail lines too (the CPU backend's)")
        p.add_argument(
            "--low-memory",
            action="store_true",
            help="one process, one tensor in memory at a time (checkpoints larger than RAM); TP=PP=EP=1",
        )
    for p in (imp, exp):
        p.add_argument(
            "--omit-unmapped",
            action="store_true",
            help="leave out, listed in the output, the checkpoint tensors no model parameter maps (by default "
            "that is an error naming them); export: write the folder without the source's tensors that no "
            "parameter holds and the source folder has no files for",
        )
    imp.add_argument(
        "--allow-non-finite",
        action="store_true",
        help="import weights holding NaN / Inf (by default that is an error naming the tensor)",
    )
    exp.add_argument(
        "--adapter-only",
        action="store_true",
        help="a PEFT run's checkpoint: write a Hugging Face PEFT adapter folder (adapter_config.json + "
        "adapter_model.safetensors) instead of merged weights",
    )
    exp.add_argument("--hf-config", help="HF folder with config.json (default: MEGATRON_PATH/hf_assets)")
    exp.add_argument(
        "--max-shard-size",
        type=shard_size,
        default=None,
        help="bytes per safetensors file, e.g. 5GB (default: the source checkpoint's files)",
    )
    return parser.parse_args(argv)


def _low_memory(args: argparse.Namespace) -> None:
    from bridge.conversion import streaming

    layout = {"--tp": args.tp, "--pp": args.pp, "--ep": args.ep}
    wide = {k: v for k, v in layout.items() if v != 1}
    if wide:
        flag, value = next(iter(wide.items()))
        raise ConfigError(
            f"{flag}={value} with --low-memory: the low-memory conversion runs in one process (TP=PP=EP=1); "
            f"drop {flag}, or drop --low-memory"
        )
    if args.direction == "import":
        streaming.stream_import(
            args.hf_path,
            args.megatron_path,
            allow_non_finite=args.allow_non_finite,
            omit_unmapped=args.omit_unmapped,
        )
        return
    if args.adapter_only:
        raise ConfigError(
            "--adapter-only with --low-memory: adapters are small; export them without --low-memory"
        )
    from bridge.conversion.auto_bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(args.hf_config) if args.hf_config else None
    streaming.stream_export(
        args.megatron_path,
        args.hf_path,
        max_shard_size=args.max_shard_size,
        bridge=bridge,
        omit_unmapped=args.omit_unmapped,
    )


def _bytes_under(path: Path, pattern: str) -> int:
    return sum(f.stat().st_size for f in path.rglob(pattern) if f.is_file()) if path.is_dir() else 0


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _is_written(path: Path, target: Path) -> bool:
    """Whether `path` is the target, in it, one of its parents (created), or in its hidden staging folder."""
    path, target = path.resolve(), target.resolve()
    if path in target.parents or path.is_relative_to(target):
        return True
    if not path.is_relative_to(target.parent):
        return False
    return path.relative_to(target.parent).parts[0].startswith(f".{target.name}.")


def write_failure(args: argparse.Namespace, err: OSError) -> ConfigError:
    """The conversion's target could not be written: one line naming the file and the way out."""
    target = Path(args.megatron_path if args.direction == "import" else args.hf_path)
    where = err.filename or target
    if err.errno == errno.ENOSPC:
        # what the conversion writes is about the size of the weights it reads
        source = Path(args.hf_path) if args.direction == "import" else None
        needed = _bytes_under(source, "*.safetensors") if source is not None else 0
        probe = next((p for p in (target, *target.parents) if p.exists()), Path("/"))
        free = os.statvfs(probe).f_bavail * os.statvfs(probe).f_frsize
        need = f"about {_gb(needed)} (the source's weights), " if needed else ""
        return ConfigError(
            f"{where}: no space left on the device (the conversion needs {need}{_gb(free)} free at {probe}); "
            "nothing was kept. Fix: free space there, or convert into a folder on another device"
        )
    reason = err.strerror or str(err)
    if not _is_written(Path(where), target):
        return ConfigError(f"{where}: {reason} while reading it. Fix: make it readable, or pass another path")
    return ConfigError(
        f"{where}: {reason} while writing {target}; nothing was kept. Fix: convert into a folder you can "
        "write to (check the parent folder's permissions and that its file system is not read-only)"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bridge.parallel.runtime import set_verbosity

    set_verbosity(args.verbose)  # quiet by default: the CPU backend's patch list only with -v
    layout = dict(
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        expert_model_parallel_size=args.ep,
    )
    start = time.perf_counter()
    try:
        from bridge.conversion.auto_bridge import AutoBridge

        if args.low_memory:
            _low_memory(args)
        elif args.direction == "import":
            AutoBridge.import_ckpt(
                args.hf_path,
                args.megatron_path,
                allow_non_finite=args.allow_non_finite,
                omit_unmapped=args.omit_unmapped,
                **layout,
            )
        else:
            if args.hf_config:
                bridge = AutoBridge.from_hf_pretrained(args.hf_config)
            else:
                bridge = AutoBridge.from_megatron_checkpoint(args.megatron_path)
            bridge.export_ckpt(
                args.megatron_path,
                args.hf_path,
                max_shard_size=args.max_shard_size,
                adapter_only=args.adapter_only,
                omit_unmapped=args.omit_unmapped,
                **layout,
            )
    except ConfigError as err:
        return report_user_error(err)
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
            raise
        return report_user_error(write_failure(args, err))
    from bridge.parallel import ranks

    if ranks.is_rank_zero():
        target = args.megatron_path if args.direction == "import" else args.hf_path
        print(f"{args.direction}ed {target} in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    from bridge.process_exit import skip_final_collections

    skip_final_collections()
    sys.exit(code)
