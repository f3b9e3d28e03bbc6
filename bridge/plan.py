"""`bridge plan` / `python -m bridge.plan`: recommend a parallel layout and estimate per-GPU memory, offline.

    bridge plan --model llama31_70b_pretrain_config --gpus 64 --json
    bridge plan --model /path/to/hf_model --gpus 16 --seq-length 32768 --overrides
    bridge plan --model mixtral_8x7b --gpus 64 --tp 2 --ep 8

--model is a recipe name, a provider preset name (e.g. llama31_70b) or a Hugging Face config.json (or
the folder holding it). Nothing heavy is imported (no torch, megatron.core or transformers): the whole
command runs in well under a second.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import sys
from dataclasses import replace
from pathlib import Path

from bridge.errors import ConfigError
from bridge.parallel.layout import ModelShape
from bridge.parallel.memory import MEMORY_MODELS, OPTIMIZERS, PRECISIONS
from bridge.parallel.plan_report import format_table, plan_overrides, plan_to_json
from bridge.parallel.planner import INTERCONNECTS, SIZE_FLAGS, PlanRequest, plan

PRESET_FAMILIES = ("llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral")


def shape_from_hf_config(cfg: dict) -> ModelShape:
    """ModelShape from a Hugging Face config.json (Llama, Mistral, Qwen2/3, Qwen MoE, Mixtral families)."""
    try:
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        layers = cfg["num_hidden_layers"]
    except KeyError as err:
        raise ConfigError(
            f"config.json: key {err} is missing. Fix: give a decoder-only LM's config.json."
        ) from None
    model_type = cfg.get("model_type", "")
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or None
    return ModelShape(
        num_layers=layers,
        num_attention_heads=heads,
        num_query_groups=cfg.get("num_key_value_heads") or heads,
        ffn_hidden_size=cfg.get("intermediate_size"),
        num_moe_experts=experts,
        hidden_size=hidden,
        vocab_size=cfg.get("vocab_size"),
        kv_channels=cfg.get("head_dim") or None,
        gated_linear_unit=cfg.get("hidden_act", "silu") in ("silu", "swish", "swiglu"),
        share_embeddings_and_output_weights=bool(cfg.get("tie_word_embeddings", False)),
        add_qkv_bias=model_type in ("qwen2", "qwen2_moe") or bool(cfg.get("attention_bias", False)),
        qk_layernorm=model_type in ("qwen3", "qwen3_moe"),
        moe_router_topk=cfg.get("num_experts_per_tok", 2) if experts else 2,
        moe_ffn_hidden_size=cfg.get("moe_intermediate_size") if experts else None,
        moe_shared_expert_intermediate_size=cfg.get("shared_expert_intermediate_size") if experts else None,
    )


def resolve_model(name: str) -> tuple[ModelShape, dict]:
    """(shape, defaults) for --model; defaults are a recipe's seq_length / batch sizes."""
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise ConfigError(
                f"--model {name!r}: no such file. Fix: give a config.json or a folder holding one."
            )
        return shape_from_hf_config(json.loads(path.read_text())), {}
    from recipes import RECIPES, get_recipe  # lazily: bridge never imports recipes at module level

    if name in RECIPES:
        cfg = get_recipe(name)()
        defaults = {
            "seq_length": getattr(cfg.model, "seq_length", None),
            "global_batch_size": getattr(cfg.train, "global_batch_size", None),
            "micro_batch_size": getattr(cfg.train, "micro_batch_size", None),
        }
        return cfg.model.model_shape(), defaults
    presets = {}
    for family in PRESET_FAMILIES:
        try:
            module = importlib.import_module(f"bridge.models.{family}.presets")
        except ImportError:
            continue
        presets.update(
            {k: getattr(module, k) for k in dir(module) if not k.startswith("_") and k[0].islower()}
        )
        if name in presets and callable(presets[name]):
            # a preset's seq_length is the model's context window (e.g. 131072), not a training length:
            # plan for --seq-length, else 4096, as for a config.json
            shape = presets[name]().model_shape()
            return replace(shape, seq_length=None), {}
    close = difflib.get_close_matches(name, [*RECIPES, *presets], n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(
        f"--model {name!r}: not a recipe, a preset or a config.json. Fix: {hint}"
        "run `python -c 'import recipes; print(recipes.list_recipes())'` for the recipe names."
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bridge plan", description="Recommend a parallel layout and estimate per-GPU memory (offline)."
    )
    ap.add_argument(
        "--model", required=True, help="recipe name, preset name, or HF config.json / model folder"
    )
    ap.add_argument("--gpus", type=int, required=True, help="number of GPUs")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument(
        "--interconnect",
        choices=INTERCONNECTS,
        default=None,
        help="between nodes (default: nvlink on one node, infiniband across nodes)",
    )
    ap.add_argument("--gpu-memory-gb", type=float, default=80.0)
    ap.add_argument("--seq-length", type=int, default=None, help="default: the recipe's, else 4096")
    ap.add_argument("--global-batch-size", type=int, default=None, help="default: the recipe's")
    ap.add_argument("--micro-batch-size", type=int, default=None, help="default: the recipe's, else 1")
    ap.add_argument("--precision", choices=PRECISIONS, default=None, help="default: bf16")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default=None, help="default: adam")
    ap.add_argument(
        "--memory-model",
        choices=MEMORY_MODELS,
        default="megatron",
        help="seed: the seeds' accounting; megatron: mixed precision + distributed optimizer",
    )
    for flag in SIZE_FLAGS:
        ap.add_argument(f"--{flag}", type=int, default=None, help=f"keep {flag} fixed and plan the rest")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--overrides", action="store_true", help="print the dotted overrides for run_recipe.py")
    return ap


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
        }
        req = PlanRequest(
            model=shape,
            gpus=args.gpus,
            gpus_per_node=args.gpus_per_node,
            interconnect=args.interconnect,
            gpu_memory_gb=args.gpu_memory_gb,
            seq_length=args.seq_length or defaults.get("seq_length"),
            global_batch_size=args.global_batch_size or defaults.get("global_batch_size"),
            micro_batch_size=args.micro_batch_size or defaults.get("micro_batch_size") or 1,
            precision=args.precision or "bf16",
            optimizer=args.optimizer or "adam",
            memory_model=args.memory_model,
            fixed={f: getattr(args, f) for f in SIZE_FLAGS if getattr(args, f) is not None},
        )
        result = plan(req)
    except ConfigError as err:
        print(f"bridge plan: {err}", file=sys.stderr)
        return 2
    overrides = plan_overrides(result, explicit)
    if args.json:
        print(json.dumps(plan_to_json(result), indent=2))
    elif args.overrides:
        if not result.fits:
            print("bridge plan: nothing fits; run without --overrides to see what would", file=sys.stderr)
            return 1
        print(" ".join(overrides))
    else:
        print(format_table(result, args.model, overrides))
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
