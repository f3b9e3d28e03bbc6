"""`bridge launch`: render a validated run for an existing scheduler, and submit it (SLURM) or print it.

    bridge launch slurm --nodes 2 --gpus-per-node 8 --partition batch --time 04:00:00 \\
        -- --recipe llama32_1b_pretrain_config checkpoint.save=/shared/ckpt train.train_iters=1000
    bridge launch k8s --kind pytorchjob --nodes 2 --gpus-per-node 8 --image REGISTRY/bridge:TAG \\
        --volume ckpt-pvc:/shared -- --recipe llama32_1b_pretrain_config checkpoint.save=/shared/ckpt

Everything after `--` is run_recipe.py's command line. The run is validated for nodes x gpus-per-node
ranks (the same plan as `run_recipe.py --dry-run --world-size N`) before anything is written: a layout
that does not fit is one `error:` line here, not a failed job in a queue. `--dry-run` prints the sbatch
script; `k8s` always prints (or writes, with --output) the manifest for `kubectl apply -f`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bridge.cli.user_error import report_user_error
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.launch import k8s, slurm
from bridge.launch.spec import LaunchSpec
from recipes import get_recipe

DEFAULT_SCRIPT = "scripts/training/run_recipe.py"


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--nodes", type=int, required=True, help="number of nodes (one torchrun agent each)")
    ap.add_argument(
        "--gpus-per-node", type=int, required=True, help="ranks per node (GPUs; processes with --cpu)"
    )
    ap.add_argument("--cpu", action="store_true", help="CPU ranks (gloo): ask for no GPUs")
    ap.add_argument("--job-name", default=None, help="default: bridge-<recipe>")
    ap.add_argument("--max-restarts", type=int, default=0, help="torchrun worker restarts after a rank fails")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="exported to every rank")
    ap.add_argument("--script", default=DEFAULT_SCRIPT, help=f"entry point (default {DEFAULT_SCRIPT})")
    ap.add_argument("--workdir", default=None, help="directory the ranks run in (default: this one)")
    ap.add_argument(
        "--python", default=None, help="interpreter on the nodes (default: this one; python in a container)"
    )
    ap.add_argument(
        "--rdzv-port", type=int, default=29500, help="port of the c10d rendezvous on the first node"
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bridge launch", description="render a run for SLURM or Kubernetes")
    sub = ap.add_subparsers(dest="scheduler", required=True)
    s = sub.add_parser("slurm", help="write and submit an sbatch script")
    _common(s)
    s.add_argument("--account")
    s.add_argument("--partition")
    s.add_argument("--time", help="sbatch --time, e.g. 04:00:00")
    s.add_argument("--container-image", help="pyxis: srun --container-image")
    s.add_argument("--container-mounts", help="pyxis: srun --container-mounts, e.g. /data:/data")
    s.add_argument("--cpus-per-task", type=int)
    s.add_argument("--log-dir", default="logs", help="sbatch and per-node logs (default: logs/)")
    s.add_argument(
        "--requeue", action="store_true", help="let SLURM requeue the job (node failure, scontrol requeue)"
    )
    s.add_argument("--chain", type=int, default=1, help="submit K jobs, each after the one before (afterany)")
    s.add_argument(
        "--sbatch", action="append", default=[], metavar="--FLAG=VALUE", help="another sbatch option"
    )
    s.add_argument("--dry-run", action="store_true", help="print the script; submit nothing")
    k = sub.add_parser("k8s", help="print a Kubeflow PyTorchJob or JobSet manifest")
    _common(k)
    k.add_argument("--kind", default="pytorchjob", help="pytorchjob (Kubeflow) or jobset")
    k.add_argument("--image", required=True, help="container image holding bridge")
    k.add_argument("--namespace", default="default")
    k.add_argument(
        "--volume", action="append", default=[], metavar="CLAIM:/PATH", help="a PVC mounted at PATH"
    )
    k.add_argument("--backoff-limit", type=int, default=3, help="pod restarts before the job fails")
    k.add_argument(
        "--output", help="write the manifest (JSON, which kubectl reads) here instead of printing it"
    )
    return ap


def _run_args(rest: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bridge launch ... --", add_help=False)
    ap.add_argument("--recipe")
    ap.add_argument("--config-file")
    ap.add_argument("overrides", nargs="*")
    args, unknown = ap.parse_known_args(rest)
    if not args.recipe:
        raise ConfigError(
            "bridge launch: the run needs --recipe NAME after `--`. Fix: ... -- --recipe NAME key=value"
        )
    if unknown:
        raise ConfigError(
            f"bridge launch: {' '.join(unknown)} after `--` is not an argument of a run (--recipe, --config-file, "
            "key=value overrides). Fix: drop it; --dry-run and --world-size are the launcher's to decide"
        )
    return args


def validated_plan(rest: list[str], world_size: int, cuda: bool):
    """The run's plan for `world_size` ranks: the one run_recipe.py --dry-run --world-size prints."""
    from bridge.config.compose import compose

    args = _run_args(rest)
    cfg, _ = compose(get_recipe(args.recipe)(), config_file=args.config_file, overrides=args.overrides)
    return args.recipe, build_plan(cfg, world_size, cuda=cuda)


def _env(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--env {pair!r}: give NAME=VALUE. Fix: --env {pair}=value")
        out.append((key, value))
    return tuple(out)


def spec_from(args: argparse.Namespace, rest: list[str], in_container: bool) -> LaunchSpec:
    recipe, plan = validated_plan(rest, args.nodes * args.gpus_per_node, cuda=not args.cpu)
    workdir = (
        str(Path(args.workdir or os.getcwd()).resolve())
        if not in_container
        else (args.workdir or "/workspace")
    )
    if not in_container and not (Path(workdir) / args.script).is_file():
        raise ConfigError(
            f"--script {args.script}: no such file under {workdir}. Fix: run from the repository root or give "
            "--workdir"
        )
    name = args.job_name or "bridge-" + recipe.replace("_", "-")
    return LaunchSpec(
        nodes=args.nodes,
        procs_per_node=args.gpus_per_node,
        gpus=not args.cpu,
        script=args.script,
        script_args=tuple(rest),
        job_name=name,
        python=args.python or ("python" if in_container else sys.executable),
        workdir=workdir,
        env=_env(args.env),
        max_restarts=args.max_restarts,
        rdzv_port=args.rdzv_port,
        checkpoint_dir=plan.config.checkpoint.save,
        data_paths=plan.data.paths,
    )


def launch(argv: list[str]) -> int:
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    else:
        rest = []
    args = build_parser().parse_args(argv)
    if args.scheduler == "slurm":
        spec = spec_from(args, rest, in_container=bool(args.container_image))
        if args.chain < 1:
            raise ConfigError(f"--chain {args.chain}: at least 1 job. Fix: --chain 1")
        opts = slurm.SlurmOptions(
            account=args.account, partition=args.partition, time=args.time,
            container_image=args.container_image, container_mounts=args.container_mounts,
            cpus_per_task=args.cpus_per_task, log_dir=args.log_dir, requeue=args.requeue,
            chain=args.chain, extra=tuple(args.sbatch),
        )  # fmt: skip
        text = slurm.render(spec, opts, slurm.chain_identity(args.chain))
        if args.dry_run:
            print(text, end="")
            return 0
        log_dir = Path(spec.workdir) / args.log_dir
        path = log_dir / f"{spec.job_name}.sbatch"
        slurm.write_script(text, path)
        ids = slurm.submit(path, args.chain)
        print(f"submitted {path} as job{'s' if len(ids) > 1 else ''} {' -> '.join(ids)}; logs in {log_dir}")
        return 0
    spec = spec_from(args, rest, in_container=True)
    opts = k8s.K8sOptions(
        image=args.image,
        namespace=args.namespace,
        volumes=tuple(_volume(v) for v in args.volume),
        backoff_limit=args.backoff_limit,
    )
    text = json.dumps(k8s.render(args.kind, spec, opts), indent=2) + "\n"
    if args.output:
        slurm.write_script(text, Path(args.output))
        print(f"wrote {args.output}: kubectl apply -f {args.output}")
    else:
        print(text, end="")
    return 0


def _volume(text: str) -> tuple[str, str]:
    claim, sep, path = text.partition(":")
    if not sep or not claim or not path:
        raise ConfigError(f"--volume {text!r}: give CLAIM:/mount/path. Fix: e.g. --volume ckpt-pvc:/shared")
    return claim, path


def main(argv: list[str] | None = None) -> int:
    try:
        return launch(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as err:
        return report_user_error(err)


if __name__ == "__main__":
    sys.exit(main())
