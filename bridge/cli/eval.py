"""`bridge eval`: lm-eval tasks on a bridge model at any TP / PP (lm-eval's task names and options).

    bridge eval --hf-path DIR --tasks hellaswag,arc_easy --limit 100
    torchrun --nproc_per_node=2 -m bridge.cli eval --hf-path DIR --tp 2 --tasks my_task --include-path TASKS/
    bridge eval --megatron-path CKPT --tasks wikitext --output-path results.json

Every rank builds its part of the model; rank 0 runs lm-eval's `simple_evaluate` with the `bridge` backend
(bridge/inference/lm_eval_backend.py) and the other ranks compute with it. Rank 0 prints lm-eval's results
table (with --output-path also writes the results JSON atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bridge.cli.model_command import run_model_command
from bridge.errors import config_error
from bridge.parallel.ranks import env_world_size


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bridge eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--hf-path", help="Hugging Face folder (imported on the fly)")
    p.add_argument("--megatron-path", help="bridge torch_dist checkpoint (root or iter_* folder)")
    p.add_argument("--hf-config", help="with --megatron-path: the HF folder with config.json and tokenizer")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size (default 1)")
    p.add_argument("--tasks", required=True, help="lm-eval task names, comma-separated")
    p.add_argument("--include-path", help="a folder of extra lm-eval task YAML files")
    p.add_argument("--num-fewshot", type=int, default=None)
    p.add_argument("--limit", type=float, default=None, help="documents per task (or a fraction < 1)")
    p.add_argument("--batch-size", type=int, default=8, help="rows per forward (default 8)")
    p.add_argument("--max-gen-toks", type=int, default=256, help="generate_until's default cap (default 256)")
    p.add_argument("--gen-kwargs", default=None, help="lm-eval's generation overrides, e.g. temperature=0")
    p.add_argument("--seed", type=int, default=1234, help="lm-eval's seeds (random, numpy, torch, fewshot)")
    p.add_argument("--output-path", help="write lm-eval's results JSON here (rank 0)")
    p.add_argument("--log-samples", action="store_true", help="with --output-path: keep every sample")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    if (args.hf_path is None) == (args.megatron_path is None):
        raise config_error(
            "--hf-path / --megatron-path",
            "both given" if args.hf_path else "neither given",
            "exactly one model source is needed",
            "pass --hf-path HF_DIR (a Hugging Face folder) or --megatron-path CKPT_DIR (a bridge checkpoint)",
        )
    if args.batch_size < 1:
        raise config_error("--batch-size", args.batch_size, "must be >= 1", "pass --batch-size 8")
    if args.limit is not None and args.limit <= 0:
        raise config_error("--limit", args.limit, "must be > 0", "drop --limit or pass e.g. --limit 100")
    if args.include_path and not Path(args.include_path).is_dir():
        raise config_error(
            "--include-path", args.include_path, "is not a folder", "pass the folder of task YAML files"
        )
    if args.log_samples and not args.output_path:
        raise config_error(
            "--log-samples", True, "samples are written to --output-path", "add --output-path results.json"
        )


def _task_manager(args: argparse.Namespace):
    from bridge.inference.lm_eval_backend import task_manager

    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    manager = task_manager(names, args.include_path)
    unknown = [t for t in names if t not in manager.all_tasks]
    if unknown or not names:
        raise config_error(
            "--tasks",
            args.tasks,
            f"lm-eval knows no task {unknown}" if unknown else "names at least one lm-eval task",
            "pass lm-eval's task names (`lm_eval ls tasks`), or --include-path FOLDER for your own YAML tasks",
        )
    return manager, names


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> dict | None:
    import lm_eval
    from lm_eval.utils import make_table

    from bridge.inference.engine import Engine
    from bridge.inference.lm_eval_backend import BridgeLM
    from bridge.inference.loading import check_layout, load_model

    check_layout(args.tp, args.pp, env_world_size(), "evaluation")
    manager, names = _task_manager(args)  # before the build: a wrong name costs no model load
    loaded = load_model(
        hf_path=args.hf_path,
        megatron_path=args.megatron_path,
        hf_config=args.hf_config,
        tp=args.tp,
        pp=args.pp,
    )
    engine = Engine(loaded.chunks, loaded.provider.vocab_size)
    if not engine.is_driver:
        engine.serve_forever()
        return None
    try:
        lm = BridgeLM(
            engine,
            loaded.tokenizer,
            batch_size=args.batch_size,
            max_gen_toks=args.max_gen_toks,
            eos_token_ids=loaded.eos_token_ids,
        )
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=names,
            task_manager=manager,
            num_fewshot=args.num_fewshot,
            limit=args.limit,
            gen_kwargs=args.gen_kwargs,
            log_samples=args.log_samples,
            random_seed=args.seed,
            numpy_random_seed=args.seed,
            torch_random_seed=args.seed,
            fewshot_random_seed=args.seed,
        )
    finally:
        engine.stop()
    print(make_table(results), flush=True)
    if args.output_path:
        _write_atomically(Path(args.output_path), json.dumps(results, indent=2, default=str))
    return results


def main(argv: list[str] | None = None) -> int:
    return run_model_command(parse_args(argv), check_args, run)


if __name__ == "__main__":
    sys.exit(main())
