"""`bridge plan` / `python -m bridge.cli.plan`: recommend a parallel layout and estimate per-GPU memory, offline.

    bridge plan --model llama31_70b_pretrain_config --gpus 64 --json
    bridge plan --model /path/to/hf_model --gpus 16 --seq-length 32768 --overrides
    bridge plan --model mixtral_8x7b --gpus 64 --tp 2 --ep 8
    bridge plan --model llama31_70b --gpus 64 --strategy fsdp2 --dp-replicate-size 2

--model is a recipe name, a provider preset name (e.g. llama31_70b) or a Hugging Face config.json (or
the folder holding it). Nothing heavy is imported (no torch, megatron.core or transformers): the whole
command runs in well under a second.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import replace
from pathlib import Path

from bridge.cli.user_error import report_user_error
from bridge.config.planning import planner_settings
from bridge.errors import ConfigError
from bridge.models.families import preset_factory, preset_families
from bridge.models.hf_translation.sizing import model_shape
from bridge.parallel.layout import ModelShape
from bridge.parallel.memory import MEMORY_MODELS, OPTIMIZERS, PRECISIONS
from bridge.parallel.planner import INTERCONNECTS, SIZE_FLAGS, STRATEGY_CHOICES, PlanRequest, plan
from bridge.parallel.planner.report import (
    compare_rows,
    format_compare,
    format_table,
    plan_overrides,
    plan_to_json,
)
from bridge.parallel.planner.systems import DEFAULT_SYSTEM, SYSTEMS
from bridge.parallel.stages import StageSplit, parse_layout
from recipes import ALIASES, RECIPES, get_recipe

DEFAULT_SEQ_LENGTH = 4096  # PlanRequest's sequence length when neither --seq-length nor the model says one


def _positive_int(cfg: dict, key: str, source: str, *, required: bool = True) -> int | None:
    value = cfg.get(key)
    if value is None and not required:
        return None
    if value is None:
        raise ConfigError(
            f"{source}: key {key!r} is missing. Fix: give a decoder-only LM's config.json "
            "(a model type of one of the families under bridge/models)."
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{source}: {key} = {value!r}: must be a positive integer. Fix: correct the file.")
    return value


def shape_from_hf_config(cfg: dict, source: str = "config.json") -> ModelShape:
    """ModelShape from a Hugging Face config.json, through the provider the family's translation makes.

    Raises ConfigError (naming `source`) when the JSON is not an object or lacks a key the planner needs.
    """
    if not isinstance(cfg, dict):
        raise ConfigError(
            f"{source}: holds a JSON {type(cfg).__name__}, not an object. Fix: give a model's config.json."
        )
    _positive_int(cfg, "num_attention_heads", source)
    _positive_int(cfg, "hidden_size", source)
    _positive_int(cfg, "num_hidden_layers", source)
    _positive_int(cfg, "vocab_size", source)
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or None
    if experts is not None:
        _positive_int(cfg, "num_experts" if "num_experts" in cfg else "num_local_experts", source)
        if cfg.get("moe_intermediate_size") is None:
            _positive_int(cfg, "intermediate_size", source)
    else:
        _positive_int(cfg, "intermediate_size", source)
    for key in (
        "num_key_value_heads",
        "head_dim",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
    ):
        _positive_int(cfg, key, source, required=False)

    return model_shape(cfg)


def _hf_defaults(cfg: dict) -> dict:
    """A config.json whose context window is below the default 4096 tokens plans for that window."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    window = cfg.get("max_position_embeddings", text.get("max_position_embeddings"))
    if isinstance(window, int) and not isinstance(window, bool) and 0 < window < DEFAULT_SEQ_LENGTH:
        return {"seq_length": window}
    return {}


def resolve_model(name: str) -> tuple[ModelShape, dict]:
    """(shape, defaults) for --model; defaults are PlanRequest fields: a recipe's settings
    (bridge.config.planning.planner_settings), a config.json's short context window."""
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise ConfigError(
                f"--model {name!r}: no such file. Fix: give a config.json or a folder holding one."
            )
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except RecursionError:  # json's decoder recurses once per nesting level
            raise ConfigError(
                f"--model {name!r}: {path} nests deeper than Python's JSON reader goes. Fix: give a Hugging "
                "Face config.json (a flat object of model fields)."
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ConfigError(
                f"--model {name!r}: {path} is not valid JSON ({err}). Fix: give a Hugging Face config.json."
            ) from None
        except OSError as err:
            raise ConfigError(
                f"--model {name!r}: cannot read {path} ({err.strerror}). Fix: check the path."
            ) from None
        return shape_from_hf_config(cfg, str(path)), _hf_defaults(cfg)

    if name in RECIPES or name in ALIASES:
        cfg = get_recipe(name)()
        # everything the dry run plans the recipe with on a GPU: batch shape, precision, optimizer,
        # recomputation, PEFT, sequence parallelism, pipeline schedule and split
        return cfg.model.model_shape(), planner_settings(cfg, cuda=True)

    factory = preset_factory(name)
    if factory is not None:
        # a preset's seq_length is the model's context window (e.g. 131072), not a training length:
        # plan for --seq-length, else 4096, as for a config.json
        provider = factory()
        return replace(provider.model_shape(), seq_length=None), {}
    preset_names = sorted(preset_families())
    close = difflib.get_close_matches(name, [*RECIPES, *ALIASES, *preset_names], n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(
        f"--model {name!r}: not a recipe, a preset or a config.json. Fix: {hint}"
        "`python scripts/training/run_recipe.py --list-recipes` prints the recipe names; "
        f"the preset names are {', '.join(preset_names)}; or give a config.json."
    )


def _given(value, default):
    """The command line's value when given (even 0, which PlanRequest then refuses), else the default."""
    return default if value is None else value


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bridge plan", description="Recommend a parallel layout and estimate per-GPU memory (offline)."
    )
    ap.add_argument(
        "--model", required=True, help="recipe name, preset name, or HF config.json / model folder"
    )
    ap.add_argument("--gpus", type=int, required=True, help="number of GPUs")
    ap.add_argument(
        "--gpu",
        choices=tuple(SYSTEMS),
        default=DEFAULT_SYSTEM,
        help="the GPU system the speed estimate uses (its peaks, memory, NVLink domain and network)",
    )
    ap.add_argument(
        "--gpus-per-node", type=int, default=None, help="default: the --gpu system's (8; gb200 72)"
    )
    ap.add_argument(
        "--interconnect",
        choices=INTERCONNECTS,
        default=None,
        help="between nodes (default: nvlink on one node, infiniband across nodes)",
    )
    ap.add_argument(
        "--gpu-memory-gb", type=float, default=None, help="default: the --gpu system's (h100: 80)"
    )
    ap.add_argument(
        "--seq-length",
        type=int,
        default=None,
        help="default: the recipe's, else 4096 (a config.json's max_position_embeddings when smaller)",
    )
    ap.add_argument("--global-batch-size", type=int, default=None, help="default: the recipe's")
    ap.add_argument("--micro-batch-size", type=int, default=None, help="default: the recipe's, else 1")
    ap.add_argument("--precision", choices=PRECISIONS, default=None, help="default: a recipe's, else bf16")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default=None, help="default: a recipe's, else adam")
    ap.add_argument(
        "--memory-model",
        choices=MEMORY_MODELS,
        default="megatron",
        help="seed: 2+2+4 bytes per parameter; megatron: mixed precision + distributed optimizer",
    )
    ap.add_argument(
        "--recompute",
        choices=("none", "full"),
        default=None,
        help="activation recomputation (default: a recipe's; else none, full only where nothing fits without)",
    )
    # no argparse `choices`: PlanRequest refuses a bad value as one ConfigError line naming the rule
    ap.add_argument(
        "--strategy",
        default="auto",
        help=f"data-parallel strategy: {' | '.join(STRATEGY_CHOICES)} (default auto: fsdp2 on more than one "
        "GPU where the layout allows it, else megatron; the reasons say which and why)",
    )
    ap.add_argument(
        "--dp-replicate-size",
        type=int,
        default=None,
        help="fsdp2 only: HSDP replicas (must divide dp and be < dp); sharded within each replica",
    )
    for flag in SIZE_FLAGS:
        ap.add_argument(f"--{flag}", type=int, default=None, help=f"keep {flag} fixed and plan the rest")
    ap.add_argument(
        "--pp-schedule",
        default=None,
        help="pipeline schedule to plan for (1f1b, interleaved_1f1b, gpipe, looped_bfs, dfs, zero_bubble; "
        "default: Megatron-Core's choice by vpp)",
    )
    ap.add_argument(
        "--pipeline-layout",
        default=None,
        help="Megatron-Core's pipeline layout string (e.g. 'Et*4|(t*4|)*14tL'): the only stage split tried "
        "(default: a recipe's split; else the planner's, docs/parallelism.md)",
    )
    ap.add_argument(
        "--compare",
        action="store_true",
        help="list the top layouts side by side with their estimates and why the first wins",
    )
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--overrides", action="store_true", help="print the dotted overrides for run_recipe.py")
    out.add_argument(
        "--launch",
        choices=("slurm", "k8s"),
        default=None,
        help="print the `bridge launch` command of the recommended layout (nodes from --gpus-per-node)",
    )
    return ap


def launch_command(scheduler: str, recipe: str, gpus: int, gpus_per_node: int, overrides: list[str]) -> str:
    """`bridge launch` for the plan: nodes x GPUs per node as the planner counted them (a recipe only:
    the launcher runs a recipe)."""
    if recipe not in RECIPES and recipe not in ALIASES:
        raise ConfigError(
            f"--launch with --model {recipe!r}: the launcher runs a recipe, not a preset or a config.json. "
            "Fix: give a recipe name as --model (run_recipe.py --list-recipes), or use --overrides"
        )
    per_node = min(gpus, gpus_per_node)
    if gpus % per_node:
        raise ConfigError(
            f"--gpus {gpus} is not a whole number of nodes of --gpus-per-node {gpus_per_node}. "
            f"Fix: --gpus {(gpus // per_node + 1) * per_node} (or a multiple of {per_node})"
        )
    extra = " --image IMAGE" if scheduler == "k8s" else ""
    return (
        f"bridge launch {scheduler} --nodes {gpus // per_node} --gpus-per-node {per_node}{extra} -- "
        f"--recipe {recipe} {' '.join(overrides)}"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        shape, defaults = resolve_model(args.model)
        explicit = {
            "seq_length": args.seq_length,
            "global_batch_size": args.global_batch_size,
            "micro_batch_size": args.micro_batch_size,
            "precision": args.precision,
            "optimizer": args.optimizer,
            "recompute": args.recompute,
            "pipeline_layout": args.pipeline_layout,
        }
        gpu = SYSTEMS[args.gpu]
        # the command line wins over the recipe's settings; what neither says the planner chooses
        recipe = {
            key: defaults[key]
            for key in (
                "split",
                "sequence_parallel",
                "trainable_params",
                "pp_schedule",
                "distributed_optimizer",
            )
            if defaults.get(key) is not None
        }
        if args.pp_schedule is not None:
            recipe["pp_schedule"] = args.pp_schedule
        if args.pipeline_layout is not None:
            parse_layout(args.pipeline_layout)  # one ConfigError for a malformed string
            recipe["split"] = StageSplit(layout=args.pipeline_layout)
        req = PlanRequest(
            model=shape,
            gpus=args.gpus,
            gpus_per_node=_given(args.gpus_per_node, gpu.gpus_per_node),
            interconnect=args.interconnect,
            gpu_memory_gb=_given(args.gpu_memory_gb, gpu.memory_gb),
            # a value given on the command line is kept as given (0 is refused, not taken as "unset")
            seq_length=_given(args.seq_length, defaults.get("seq_length")),
            global_batch_size=_given(args.global_batch_size, defaults.get("global_batch_size")),
            round_global_batch=args.global_batch_size is None,  # a recipe's default may be rounded
            micro_batch_size=_given(args.micro_batch_size, defaults.get("micro_batch_size") or 1),
            precision=args.precision or defaults.get("precision") or "bf16",
            optimizer=args.optimizer or defaults.get("optimizer") or "adam",
            recompute=args.recompute or defaults.get("recompute"),
            memory_model=args.memory_model,
            fixed={f: getattr(args, f) for f in SIZE_FLAGS if getattr(args, f) is not None},
            strategy=args.strategy,
            dp_replicate_size=args.dp_replicate_size,
            gpu=args.gpu,
            **recipe,
        )
        result = plan(req)
    except ConfigError as err:
        return report_user_error(err)  # one line, as every entry point
    overrides = plan_overrides(result, explicit)
    if args.json:
        data = plan_to_json(result)
        if args.compare:
            data["compare"] = compare_rows(result)
        print(json.dumps(data, indent=2))
    elif args.compare:
        print(format_compare(result))
    elif args.overrides:
        if not result.fits:
            print("bridge plan: nothing fits; run without --overrides to see what would", file=sys.stderr)
            return 1
        print(" ".join(overrides))
    elif args.launch:
        if not result.fits:
            print("bridge plan: nothing fits; run without --launch to see what would", file=sys.stderr)
            return 1
        try:
            print(launch_command(args.launch, args.model, req.gpus, req.gpus_per_node, overrides))
        except ConfigError as err:
            return report_user_error(err)
    else:
        print(format_table(result, args.model, overrides))
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
