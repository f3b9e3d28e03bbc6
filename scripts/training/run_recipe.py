"""Train (or dry-run) a recipe with dotted overrides.

    torchrun --nproc_per_node=4 scripts/training/run_recipe.py --recipe llama32_1b_pretrain_config \
        model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=2 model.sequence_parallel=True
    python scripts/training/run_recipe.py --recipe llama31_70b_pretrain_config --dry-run --world-size 64
    python scripts/training/run_recipe.py --list-recipes

--dry-run validates exactly what a run would (the same RunPlan), prints the config as YAML followed by
the plan's decisions as YAML comments (so the output loads back with --config-file), and exits 0
without importing torch or megatron.core. Invalid input exits 2 with one `error:` line on stderr, printed
once whichever rank finds it first, and carried by torchrun's failure summary (bridge.cli.user_error);
`bridge run` launches like torchrun and prints only that line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Runnable as `python scripts/training/run_recipe.py` (and under torchrun) without installing the package.
_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from bridge.cli.user_error import EXIT_USER_ERROR, previous_stop, report_user_error  # noqa: E402
from bridge.config.run_plan import build_plan  # noqa: E402
from bridge.errors import ConfigError  # noqa: E402
from bridge.parallel.planner.systems import SYSTEMS  # noqa: E402
from bridge.parallel.ranks import env_world_size  # noqa: E402
from bridge.process_exit import exit_if_distributed  # noqa: E402

EXIT_INVALID = EXIT_USER_ERROR


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run a training recipe; trailing key=value arguments override any config field "
        "(Hydra grammar: +key=value adds, ~key deletes).",
    )
    parser.add_argument("--recipe", help="recipe name (see --list-recipes)")
    parser.add_argument(
        "--list-recipes",
        nargs="?",
        const="",
        default=None,
        metavar="FILTER",
        help="print the recipes grouped by family and kind and exit; FILTER keeps those whose family, kind "
        "(pretrain / sft / peft), name or alias contains it (e.g. --list-recipes qwen3)",
    )
    parser.add_argument(
        "--config-file", help="YAML merged before the overrides (own shape or AutoModel form)"
    )
    parser.add_argument("--dry-run", action="store_true", help="validate and print the config; do not train")
    parser.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="number of ranks to validate for (default: WORLD_SIZE or 1)",
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="dry run: plan for this device (default: cuda when an NVIDIA driver is present)",
    )
    parser.add_argument(
        "--gpu",
        choices=tuple(SYSTEMS),
        default=None,
        help="dry run: plan for this GPU system (implies cuda) and check the memory per rank against it, "
        "as `bridge plan --gpu` does",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="the run's detail lines too (= logger.verbose=true)"
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.train_iters=10")
    args = parser.parse_args(argv)
    if args.list_recipes is None and not args.recipe:
        parser.error("--recipe is required (or --list-recipes)")
    return args


def is_rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"  # no ConfigError here: it decides who prints one


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 on success, 2 on invalid input (one `error:` line on stderr, no traceback; under
    torchrun every rank fails the same way, the first to fail prints it and all write torchrun's error file)."""
    stopped = previous_stop()
    if stopped is not None:  # a torchrun restart after a mistake or a NaN stop would only repeat it
        return report_user_error(
            "not retried: an earlier attempt of this launch stopped with a mistake or a NaN stop, which a "
            f"restart repeats ({stopped.removeprefix('error: ')}). Fix: correct it and launch again"
        )
    try:
        return run(argv)
    except ConfigError as err:
        return report_user_error(err)
    except Exception as err:
        exit_if_distributed(err)  # a rank of a run: never left hanging in the interpreter's exit
        raise


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from recipes import get_recipe, recipe_info

    if args.list_recipes is not None:
        from recipes import RECIPES
        from recipes.listing import list_lines

        lines = list_lines(RECIPES.values(), args.list_recipes)
        if not lines:
            raise ConfigError(
                f"--list-recipes {args.list_recipes!r}: no recipe matches. Fix: see --list-recipes."
            )
        print("\n".join(lines))
        return 0

    from bridge.config.compose import compose

    world_size = args.world_size if args.world_size is not None else env_world_size()
    if (
        not args.dry_run
        and args.world_size is not None
        and "WORLD_SIZE" in os.environ
        and world_size != env_world_size()
    ):
        raise ConfigError(
            f"--world-size {world_size} differs from WORLD_SIZE={env_world_size()} of this launch. "
            "Fix: drop --world-size (it is for dry runs) or launch that many ranks."
        )
    cfg, warnings = compose(get_recipe(args.recipe)(), config_file=args.config_file, overrides=args.overrides)
    if args.verbose:
        cfg.logger.verbose = True
    finetuning = recipe_info(args.recipe).entry == "finetune"

    if args.dry_run:
        cuda = None if args.device is None else args.device == "cuda"
        env = None
        if args.gpu is not None:
            if args.device == "cpu":
                raise ConfigError(
                    f"--gpu {args.gpu} plans for a GPU and --device cpu for the CPU. Fix: drop one of them."
                )
            from bridge.config.environment import Environment

            env = Environment.for_system(args.gpu)
        # inputs still to give are warnings: the plan stands mock data in for them
        from recipes.dry_run import missing_inputs, with_stand_ins

        pending = missing_inputs(cfg, finetuning)
        plan = (
            build_plan(cfg, world_size, cuda=cuda, env=env)
            if not pending
            else build_plan(with_stand_ins(cfg), world_size, cuda=cuda, env=env)
        )
        memory_line = []
        if args.gpu is not None:
            from bridge.config.system_check import system_memory_check

            memory_line = [system_memory_check(plan, args.gpu)]
        if finetuning and not pending:  # what finetune() checks before it starts, in the same words
            from bridge.config.finetune_rules import check_finetune_start

            check_finetune_start(plan.config)
        warnings = [*warnings, *(f"still needed: {line}" for line in pending)]
        print((cfg if pending else plan.config).to_yaml(), end="")
        print("# plan (comments: this output loads back with --config-file)")
        for line in [*(f"warning: {w}" for w in warnings), *plan.summary_lines(), *memory_line]:
            print(f"# {line}")
        return 0

    for flag, value in (("--device", args.device), ("--gpu", args.gpu)):
        if value is not None:
            raise ConfigError(
                f"{flag} is for dry runs: a run uses the device it is launched on. Fix: drop it."
            )
    if is_rank_zero():
        for line in warnings:  # the plan's own warnings are logged once by pretrain()
            print(f"warning: {line}", file=sys.stderr)
    from bridge.training.process_plan import plan_for_this_process

    plan = plan_for_this_process(cfg)  # a refused config is said before torch is imported
    from bridge.training.pretrain import finetune, pretrain

    (finetune if finetuning else pretrain)(plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
