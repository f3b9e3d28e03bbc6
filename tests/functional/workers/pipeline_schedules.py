"""The torch.distributed.pipelining schedules (gpipe, looped_bfs, dfs, zero_bubble) over Megatron-Core chunks
against a PP=1 run of the same batches, from the same weights (one TP1/PP1 checkpoint, resharded).

Every run trains 2 steps with pretrain(); after each step's forward/backward (before the optimizer) the
worker takes every parameter's finalised gradient (Megatron-Core DDP's main_grad), named by its global
layer number, gathers them on rank 0 and compares them with the reference run's: full tensors when
tp = 1, per-parameter norms (TP shards summed) when tp = 2. Prints one @@run line per run:
{"run", "losses", "grad_norms", "validation_losses" (world2: after each step), "names_match" (the same parameters as the reference), "max_grad_diff" (max over
parameters and steps of max|g - g_ref| / max|g_ref|; null for tp > 1 and for reduce-scattered gradients),
"max_norm_diff" (the same for the per-parameter gradient norms), "engine", "pipeline"}. The weights: what a
PP=2 x VPP=2 run builds from the seed, saved once as the runs' pretrained checkpoint; the seeded_* runs
(fsdp2 reads no torch_dist checkpoint) build the same weights from the seed themselves.
Each suite then trains a 5-layer model on uneven stages (uneven_runs: first/last stage counts and layout
strings, under Megatron-Core's schedules and the torch ones) against its own PP=1 run, uneven_pp1.
Suite world2 first checks the refusals (before any model is built): for each refused override set, the
dry run (scripts/training/run_recipe.py --dry-run --world-size 2) and the launched run (run_recipe.py under
this torchrun) exit 2 with the same error line; one @@refused line each {"case", "dry", "launched"}.
usage: pipeline_schedules.py WORKDIR SUITE   (SUITE: world2 | world4)
"""

from __future__ import annotations

import re
import sys

from train_common import emit, reset_parallel_state, tiny_config

from bridge.config.run_plan import build_plan

SNAPSHOTS: list[dict] = []
REFUSED = {  # world 2, pp 2: refused by validation, with the measured reason (docs/parallelism.md)
    "v_schedule": ["model.virtual_pipeline_model_parallel_size=2", "distributed.pp_schedule=v_schedule"],
    "zero_bubble_recompute": [
        "model.virtual_pipeline_model_parallel_size=2",
        "distributed.pp_schedule=zero_bubble",
        "distributed.activation_checkpointing=true",
    ],
    "gpipe_with_vpp": ["model.virtual_pipeline_model_parallel_size=2", "distributed.pp_schedule=gpipe"],
    "dfs_5_microbatches": [
        "model.virtual_pipeline_model_parallel_size=2",
        "distributed.pp_schedule=dfs",
        "train.global_batch_size=5",
    ],
}


def _refusals(common: list[str]) -> None:
    """The dry run's verdict is the launched run's, for every refused case."""
    import contextlib
    import io
    import os
    from pathlib import Path

    from train_common import SHORT_RUN, TINY_MODEL

    scripts = Path(__file__).resolve().parents[3] / "scripts" / "training"
    sys.path.insert(0, str(scripts))
    import run_recipe

    def run(args: list[str]) -> tuple[int, str]:
        err = io.StringIO()
        # main() runs in-process many times here: report as a plain process does (rank 0 prints every
        # line), not once per torchrun launch as bridge.cli.user_error does under torchrun
        error_file = os.environ.pop("TORCHELASTIC_ERROR_FILE", None)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = run_recipe.main(args)
        finally:
            if error_file is not None:
                os.environ["TORCHELASTIC_ERROR_FILE"] = error_file
        lines = [line for line in err.getvalue().splitlines() if line.startswith("error: ")]
        return code, lines[0] if lines else ""

    for case, extra in REFUSED.items():
        given = [*TINY_MODEL, *SHORT_RUN, *common, "model.pipeline_model_parallel_size=2", *extra]
        overrides = list({o.split("=", 1)[0]: o for o in given}.values())  # the last value of a key wins
        args = ["--recipe", "llama32_1b_pretrain_config", *overrides]
        dry = run([*args, "--dry-run", "--world-size", "2", "--device", "cpu"])
        launched = run(args)
        emit("refused", {"case": case, "dry": dry, "launched": launched})


def _global_name(chunk, name: str) -> str:
    from bridge.parallel.wrappers import unwrap

    model = unwrap(chunk)
    found = re.match(r"decoder\.layers\.(\d+)\.(.*)", name)
    if found:
        layer = model.decoder.layers[int(found.group(1))]
        return f"decoder.layers.{layer.layer_number - 1}.{found.group(2)}"
    if name == "output_layer.weight" and model.share_embeddings_and_output_weights:
        return "embedding.word_embeddings.weight"  # the tied weight: one parameter at PP=1
    return name


def _snapshot(model: list) -> dict:
    """{global name: (tensor-parallel?, tp rank, gradient)} of this rank's parameters."""
    from megatron.core import parallel_state as ps

    from bridge.parallel.wrappers import unwrap

    out = {}
    for chunk in model:
        for name, p in unwrap(chunk).named_parameters():
            grad = getattr(p, "main_grad", None)
            grad = p.grad if grad is None else grad
            if hasattr(grad, "full_tensor"):  # fsdp2: the DTensor shard -> the whole gradient
                grad = grad.full_tensor()
            split = bool(getattr(p, "tensor_model_parallel", False))
            out[_global_name(chunk, name)] = (
                split,
                ps.get_tensor_model_parallel_rank(),
                grad.detach().clone(),
            )
    return out


def _install_gradient_probe() -> None:
    import bridge.training.train as train

    forward_backward = train._forward_backward

    def probed(ctx, iterators, forward_only):
        result = forward_backward(ctx, iterators, forward_only)
        if not forward_only:
            SNAPSHOTS.append(_snapshot(ctx.model))
        return result

    train._forward_backward = probed


def _gather(snapshot: dict) -> tuple[dict, dict]:
    """On rank 0: {name: full gradient} (tp = 1 parameters only) and {name: gradient norm}."""
    import torch

    parts = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(parts, snapshot)
    full, squares = {}, {}
    for part in parts:
        for name, (split, tp_rank, grad) in part.items():
            key = (name, tp_rank if split else 0)
            if key not in squares:  # DP replicas (and tied copies after finalize) hold the same gradient
                squares[key] = float(grad.double().pow(2).sum())
                if not split:
                    full.setdefault(name, grad)
    norms: dict[str, float] = {}
    for (name, _), sq in squares.items():
        norms[name] = norms.get(name, 0.0) + sq
    return full, {k: v**0.5 for k, v in norms.items()}


def _max_rel_diff(got: dict, ref: dict) -> float:
    import torch

    worst = 0.0
    for name, r in ref.items():
        g = got[name]
        if isinstance(r, torch.Tensor):
            scale = float(r.abs().max())
            diff = float((g.reshape(r.shape) - r).abs().max())
        else:
            scale, diff = abs(r), abs(g - r)
        worst = max(worst, diff / max(scale, 1e-12))
    return worst


UNEVEN_LAYERS = 5


def uneven_runs(pp) -> dict[str, dict[str, list[str]]]:
    """Runs of the 5-layer model, per suite, against its uneven_pp1 run: Megatron-Core's schedules and the
    torch ones, by first/last stage counts and by layout strings (with virtual stages too)."""
    layout = "model.pipeline_model_parallel_layout="
    return {
        "world2": {
            "uneven_pp1": [],
            "uneven_1f1b_first3": [*pp(2), "model.num_layers_in_first_pipeline_stage=3"],
            "uneven_interleaved_layout": [*pp(2, 2), f"{layout}Et|t|tt|tL"],
            "uneven_gpipe_last1": [*pp(2, schedule="gpipe"), "model.num_layers_in_last_pipeline_stage=1"],
            "uneven_dfs_layout": [*pp(2, 2, "dfs"), f"{layout}Et|tt|t|tL"],
        },
        "world4": {
            "uneven_pp1": [],
            "uneven_1f1b_pp4_layout": [*pp(4), f"{layout}'E(t|)*3ttL'"],
            "uneven_gpipe_pp4_first2": [
                *pp(4, schedule="gpipe"),
                "model.num_layers_in_first_pipeline_stage=2",
            ],
            "uneven_zero_bubble_pp2_vpp2": [*pp(2, 2, "zero_bubble"), f"{layout}Ett|t|t|tL"],
        },
    }


def main(workdir: str, suite: str) -> None:
    import torch

    from bridge.checkpoint import save_checkpoint
    from bridge.parallel import runtime
    from bridge.training import pretrain

    world = int(suite.removeprefix("world"))
    layers = 8 if world == 4 else 4
    common = [
        f"model.num_layers={layers}",
        "dataset.kind=mock",
        "train.train_iters=2",
        "optimizer.lr=0.003",
        "optimizer.min_lr=0.0003",
        "optimizer.use_distributed_optimizer=False",
        "distributed.overlap_param_gather=False",
        f"checkpoint.pretrained_checkpoint={workdir}/init",
    ]
    if world == 2:  # evaluation (the schedules' forward-only path) after every step, between the train steps
        common += ["validation.eval_interval=1", "validation.eval_iters=1"]

    def pp(n, vpp=None, schedule=None):
        out = [f"model.pipeline_model_parallel_size={n}"]
        out += [f"model.virtual_pipeline_model_parallel_size={vpp}"] if vpp else []
        return out + ([f"distributed.pp_schedule={schedule}"] if schedule else [])

    # The weights every run starts from: what a PP=2 x VPP=2 run builds from the seed (saved once, resharded
    # on load), so the seeded_* runs (fsdp2 reads no torch_dist checkpoint) start from them too.
    seeded = ["checkpoint.pretrained_checkpoint=null"]
    init = build_plan(tiny_config(*common, *pp(2, 2, "dfs"), *seeded), world, cuda=torch.cuda.is_available())
    runtime.initialize_distributed(init.layout, seed=init.config.rng.seed)
    chunks = init.provider.provide_distributed_model(wrap_with_ddp=False, seed=init.config.rng.seed)
    save_checkpoint(f"{workdir}/init", 0, chunks, save_rng=False)
    del chunks
    reset_parallel_state()

    tp2 = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"]
    suites = {
        "world2": {
            "pp1": [],
            "gpipe_pp2": pp(2, schedule="gpipe"),
            "looped_bfs_pp2_vpp2_scaled": [
                *pp(2, 2, "looped_bfs"),
                "distributed.scale_grads_in_schedule=true",
            ],
            "dfs_pp2_vpp2": pp(2, 2, "dfs"),
            "zero_bubble_pp2_vpp2": pp(2, 2, "zero_bubble"),
        },
        "world4": {
            "pp1": [],
            "gpipe_pp4": pp(4, schedule="gpipe"),
            "looped_bfs_pp2_vpp2_mbs2_distopt": [
                *pp(2, 2, "looped_bfs"),
                "train.micro_batch_size=2",
                "optimizer.use_distributed_optimizer=True",
                "distributed.overlap_param_gather=True",
            ],
            "zero_bubble_pp4_vpp2": pp(4, 2, "zero_bubble"),
            "zero_bubble_tp2_pp2_vpp2": [*tp2, *pp(2, 2, "zero_bubble")],
            "seeded_dfs_pp2_vpp2": [*pp(2, 2, "dfs"), *seeded],
            "seeded_fsdp2_dfs_pp2_vpp2": [*pp(2, 2, "dfs"), *seeded, "distributed.strategy=fsdp2"],
        },
    }
    if suite == "world2":
        _refusals([c for c in common if not c.startswith("checkpoint.pretrained_checkpoint")])
    # Uneven stages: a 5-layer model that neither 2 nor 4 stages divide, from its own PP=1 checkpoint.
    uneven_common = [
        *(c for c in common if not c.startswith(("model.num_layers", "checkpoint.pretrained_checkpoint"))),
        f"model.num_layers={UNEVEN_LAYERS}",
        f"checkpoint.pretrained_checkpoint={workdir}/init_uneven",
    ]
    init = build_plan(tiny_config(*uneven_common, *seeded), world, cuda=torch.cuda.is_available())
    runtime.initialize_distributed(init.layout, seed=init.config.rng.seed)
    chunks = init.provider.provide_distributed_model(wrap_with_ddp=False, seed=init.config.rng.seed)
    save_checkpoint(f"{workdir}/init_uneven", 0, chunks, save_rng=False)
    del chunks
    reset_parallel_state()
    runs = [(name, common, extra) for name, extra in suites[suite].items()]
    runs += [(name, uneven_common, extra) for name, extra in uneven_runs(pp)[suite].items()]
    _install_gradient_probe()
    ref_full: list[dict] = []
    ref_norms: list[dict] = []
    for name, run_common, extra in runs:
        SNAPSHOTS.clear()
        plan = build_plan(tiny_config(*run_common, *extra), world, cuda=torch.cuda.is_available())
        result = pretrain(plan)
        gathered = [_gather(s) for s in SNAPSHOTS]
        record = {
            "run": name,
            "losses": result.losses,
            "grad_norms": result.grad_norms,
            "validation_losses": result.validation_losses,
        }
        if torch.distributed.get_rank() == 0:
            full = [f for f, _ in gathered]
            norms = [n for _, n in gathered]
            if name.endswith("pp1"):  # pp1, uneven_pp1: the reference of the runs after it
                ref_full, ref_norms = full, norms
            record["names_match"] = all(set(n) == set(r) for n, r in zip(norms, ref_norms, strict=True))
            compared = record["names_match"]
            distributed_optimizer = plan.config.optimizer.use_distributed_optimizer and plan.layout.dp > 1
            exact = compared and plan.layout.tp == 1 and not distributed_optimizer  # reduce-scatter: shards
            record["max_grad_diff"] = (
                max(_max_rel_diff(f, r) for f, r in zip(full, ref_full, strict=True)) if exact else None
            )
            record["max_norm_diff"] = (
                max(_max_rel_diff(n, r) for n, r in zip(norms, ref_norms, strict=True))
                if compared and not distributed_optimizer
                else None
            )
            record["engine"] = plan.pipeline.engine
            record["pipeline"] = plan.pipeline.describe(plan.layout.pp, plan.num_microbatches)
        emit("run", record)
        reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
