"""`bridge plan` at a recipe's fixed layout agrees with the recipe's dry run: it accepts the layout exactly
when the dry run does, with the same memory estimate per rank. Every recipe, at its published GPU count,
with its own layout and with the virtual pipeline stages changed (none, 2, 4, 8), so both sides meet
uneven stages, the embedding and loss counted as layers, layout strings and refusals.

Both sides run the same rule code (bridge.parallel.stages through ParallelLayout, bridge.parallel.memory);
this test keeps the planner from drifting back to rules of its own. The references no one here wrote are
Megatron-Core's own split rules, which tests/unit/test_stages.py compares bridge.parallel.stages with."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from bridge.cli.plan import main as plan_main
from bridge.config.environment import Environment
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.provider_checks import has_mla_qk_norm_resolver
from recipes import RECIPES, get_recipe
from recipes.dry_run import missing_inputs, with_stand_ins

H100 = Environment(
    cuda=True, device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
    packages={"transformer_engine": "2.8.0"},
)  # fmt: skip
B200 = Environment(
    cuda=True, device_name="NVIDIA B200", compute_capability=(10, 0), packages={"transformer_engine": "2.8.0"}
)
# multi-latent attention without query compression: megatron-core 0.19.2 refuses it whatever the layout
NO_QUERY_COMPRESSION = ("deepseek_v2_lite", "moonlight_16b")
VPP_VARIANTS = ("recipe", None, 2, 4, 8)


def _plan(argv: list[str]) -> tuple[int, dict | None, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = plan_main(argv)
    return code, (json.loads(out.getvalue()) if out.getvalue().strip() else None), err.getvalue()


def _dry_run(name: str, world: int, vpp) -> tuple[object | None, str]:
    """(the dry run's plan or None, its error)."""
    cfg = get_recipe(name)()
    if vpp != "recipe":
        cfg.model.virtual_pipeline_model_parallel_size = vpp  # = the override, without OmegaConf's cost
    env = B200 if cfg.mixed_precision.precision == "bf16_with_mxfp8_mixed" else H100
    if missing_inputs(cfg):
        cfg = with_stand_ins(cfg)
    try:
        return build_plan(cfg, world, env=env), ""
    except ConfigError as err:
        return None, str(err)


def _cases():
    for name, info in RECIPES.items():
        if name.startswith(NO_QUERY_COMPRESSION) and has_mla_qk_norm_resolver():
            continue  # refused by Megatron-Core's attention rules on 0.19, not by the layout
        for vpp in VPP_VARIANTS:
            yield name, info.default_world_size, vpp


def test_plan_accepts_a_recipes_layout_exactly_when_the_dry_run_does_with_the_same_memory():
    checked = accepted = refused = 0
    disagree: list[str] = []
    for name, world, vpp in _cases():
        cfg = get_recipe(name)()
        m = cfg.model
        if vpp != "recipe" and m.pipeline_model_parallel_size == 1:
            continue  # virtual stages need a pipeline: both refuse, nothing to compare
        dry, error = _dry_run(name, world, vpp)
        v = m.virtual_pipeline_model_parallel_size if vpp == "recipe" else vpp
        etp = m.expert_tensor_parallel_size
        sizes = dict(
            tp=m.tensor_model_parallel_size,
            pp=m.pipeline_model_parallel_size,
            vpp=v or 1,  # --vpp 1: no virtual stages
            cp=m.context_parallel_size,
            ep=m.expert_model_parallel_size,
            etp=etp if etp is not None else m.tensor_model_parallel_size,  # Megatron-Core's None: = tp
        )
        argv = ["--model", name, "--gpus", str(world), "--strategy", cfg.distributed.strategy, "--json"]
        argv += [x for k, n in sizes.items() for x in (f"--{k}", str(n))]
        if cfg.distributed.dp_replicate_size is not None:
            argv += ["--dp-replicate-size", str(cfg.distributed.dp_replicate_size)]
        code, data, err = _plan(argv)
        what = f"{name} vpp={vpp}: dry run {'accepts' if dry else 'refuses: ' + error}; plan {err or code}"
        if (code in (0, 1)) != (dry is not None):
            disagree.append(what)
            continue
        checked += 1
        if dry is None:
            refused += 1
            continue
        accepted += 1
        planned = data if data.get("memory_gb") else data["closest"]
        if planned["memory_gb"]["total"] != pytest.approx(dry.memory.total, abs=5e-4):
            disagree.append(what + f" memory {planned['memory_gb']['total']} vs {dry.memory.total}")
    assert not disagree, "\n".join(disagree)
    # every recipe's own layout is accepted, and the variants include refusals
    assert accepted >= len(RECIPES) - 6 and refused > 0 and checked > accepted


def _dry_run_with(name: str, world: int, global_batch_size: int | None = None, **model) -> object:
    cfg = get_recipe(name)()
    if global_batch_size is not None:
        cfg.train.global_batch_size = global_batch_size
    for key, value in model.items():
        setattr(cfg.model, key, value)  # = model.<key>=<value> overrides
    return build_plan(cfg, world, env=H100)


@pytest.mark.parametrize(
    "preset,recipe,gpus,sizes",
    [
        # Megatron-Bridge's published Llama 3.1 405B and Qwen3 235B layouts (issue 43): pp x vpp does not
        # divide the layers (126, 94); the embedding and the loss counted as layers make them even
        ("llama31_405b", "llama31_405b_pretrain_config", 1024, dict(tp=8, pp=8, vpp=8, cp=2)),
        ("qwen3_235b_a22b", "qwen3_235b_a22b_pretrain_config", 256, dict(tp=2, pp=8, vpp=4, cp=2, ep=32)),
    ],
)
def test_published_layouts_on_a_preset_are_the_recipes_dry_run(preset, recipe, gpus, sizes):
    """The preset plans the split itself (account_for_embedding/loss_in_pipeline_split, the recipe's own),
    and its estimate at the recipe's sequence and batch is the recipe's dry run with those sizes."""
    cfg = get_recipe(recipe)()
    # an H200: the 405B layout at the recipe's 8192 tokens needs 77.6 GB without recomputation, more than
    # an H100's budget (the plan would recompute; the recipe does not)
    argv = ["--model", preset, "--gpus", str(gpus), "--strategy", "megatron", "--gpu", "h200", "--json"]
    # the interleaved schedule needs at least pp micro batches per data-parallel rank (Megatron-Core's
    # rule, checked by the plan and the dry run alike): the recipe's batch, or the smallest that has them
    gbs = max(
        cfg.train.global_batch_size,
        sizes["pp"] * cfg.train.micro_batch_size * gpus // (sizes["tp"] * sizes["pp"]),
    )
    argv += ["--seq-length", str(cfg.model.seq_length), "--global-batch-size", str(gbs)]
    argv += [x for k, n in sizes.items() for x in (f"--{k}", str(n))]
    code, data, err = _plan(argv)
    assert code == 0 and data["fits"], err
    assert data["account_for_embedding_in_pipeline_split"] and data["account_for_loss_in_pipeline_split"]
    names = dict(
        tp="tensor_model", pp="pipeline_model", vpp="virtual_pipeline_model", cp="context", ep="expert_model"
    )
    model = {f"{names[k]}_parallel_size": n for k, n in sizes.items()}
    plan = _dry_run_with(recipe, gpus, global_batch_size=gbs, **model)
    assert data["memory_gb"]["total"] == pytest.approx(plan.memory.total, abs=5e-4)
    # each stage holds pp*vpp-th of the layers plus the embedding and the loss: first and last one fewer
    slots = (cfg.model.num_layers + 2) // sizes["pp"]
    assert data["stage_layers"] == [slots - 1, slots, slots - 1]


def test_a_pipeline_layout_string_is_planned_as_the_recipe_that_gives_it():
    """DeepSeek-V3's published layout string on the preset (--pipeline-layout) and the recipe's dry run."""
    recipe = "deepseek_v3_pretrain_config"
    cfg = get_recipe(recipe)()
    layout = cfg.model.pipeline_model_parallel_layout
    argv = ["--model", "deepseek_v3", "--gpus", "1024", "--tp", "2", "--pp", "16", "--ep", "64", "--vpp", "1"]
    argv += ["--strategy", "megatron", "--recompute", "full", "--json"]
    argv += [
        "--seq-length",
        str(cfg.model.seq_length),
        "--global-batch-size",
        str(cfg.train.global_batch_size),
    ]
    code, data, err = _plan([*argv, "--pipeline-layout", layout])
    assert code == 0 and data["pipeline_model_parallel_layout"] == layout, err
    assert data["memory_gb"]["total"] == pytest.approx(_dry_run_with(recipe, 1024).memory.total, abs=5e-4)
    # a string the pipeline does not take is the run's own refusal, before any planning
    code, data, err = _plan([*argv, "--pipeline-layout", "Et*4|(t*4|)*13tL"])
    assert code == 2 and "has 15 stage(s), not a multiple of model.pipeline_model_parallel_size = 16" in err


def test_every_recipe_is_planned_at_its_published_gpu_count():
    """Free sizes: every recipe gets a valid layout (fitting or the closest), its own split included (a layout
    string decides which pp it takes: moonlight_16b_sft's 'Et*14|t*13L' on PP=2)."""
    refused = []
    for name, info in RECIPES.items():
        code, _, err = _plan(["--model", name, "--gpus", str(info.default_world_size), "--json"])
        if code not in (0, 1):
            refused.append(f"{name}: {err}")
    assert not refused, "\n".join(refused)
    code, data, _ = _plan(["--model", "moonlight_16b_sft_8gpu_h100_bf16_config", "--gpus", "8", "--json"])
    assert (
        data["pipeline_model_parallel_size"] == 2 and data["pipeline_model_parallel_layout"] == "Et*14|t*13L"
    )
