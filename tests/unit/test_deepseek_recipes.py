"""The DeepSeek-V3, Kimi-K2 and DeepSeek-V2-Lite recipes (recipes/deepseek.py): Megatron-Bridge's layouts and
values, validated and dry-run (scripts/training/run_recipe.py --dry-run) on their published GPU counts."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import pytest

from bridge.config.compose import compose
from bridge.errors import ConfigError
from bridge.models.provider_checks import has_mla_qk_norm_resolver
from recipes import RECIPES, get_recipe, recipe_info

# name -> (tp, pp, ep, sp, pipeline layout, layers per rank, (seq, global batch, micro batch, iters), recompute)
PP16 = "+".join(["4"] * 15 + ["1"])
PRETRAIN = {
    "deepseek_v3_pretrain_config": (
        2,
        16,
        64,
        True,
        "Et*4|(t*4|)*14tL",
        PP16,
        (4096, 4096, 1, 1_000_000),
        None,
    ),
    "kimi_k2_pretrain_config": (
        2,
        16,
        32,
        True,
        "Et*4|(t*4|)*14tL",
        PP16,
        (4096, 4096, 1, 1_000_000),
        "selective",
    ),
    "deepseek_v2_lite_pretrain_config": (1, 1, 8, False, None, None, (4096, 512, 1, 1_000_000), "full"),
}
# name -> (ep, peft target modules or None for full SFT)
FINETUNE = {"deepseek_v2_lite_sft_config": (8, None), "deepseek_v2_lite_peft_config": (8, ["linear_proj"])}
DEEPSEEK_RECIPES = (*PRETRAIN, *FINETUNE)
# megatron-core 0.19's multi-latent attention adds a query norm DeepSeek-V2-Lite does not have
V2_LITE_REFUSED = has_mla_qk_norm_resolver()


# the module's other recipes (Megatron-Bridge's aliases): DeepSeek-V2 and V3 on 32 nodes (test_recipe_registry.py)
OTHER_RECIPES = ("deepseek_v2_pretrain_config", "deepseek_v3_pretrain_config_32nodes")


def test_the_module_registers_these_recipes():
    module = sorted(n for n, info in RECIPES.items() if info.module == "deepseek")
    assert module == sorted(recipe_info(n).name for n in (*DEEPSEEK_RECIPES, *OTHER_RECIPES))
    assert [recipe_info(n).default_world_size for n in PRETRAIN] == [1024, 512, 8]


@pytest.mark.parametrize("name", list(PRETRAIN))
def test_pretraining_recipe_validates_on_its_gpu_count_with_published_values(name):
    tp, pp, ep, sp, layout, per_rank, run, recompute = PRETRAIN[name]
    cfg = get_recipe(name)()
    if "v2_lite" in name and V2_LITE_REFUSED:
        with pytest.raises(ConfigError, match="QKNormConfigResolver"):
            cfg.validate(recipe_info(name).default_world_size, cuda=True)
        return
    plan = cfg.validate(recipe_info(name).default_world_size, cuda=True)
    m, c = plan.config.model, plan.config
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.expert_model_parallel_size) == (
        tp,
        pp,
        ep,
    )
    assert (m.sequence_parallel, m.pipeline_model_parallel_layout, m.recompute_granularity) == (
        sp,
        layout,
        recompute,
    )
    assert plan.layout.min_gpus == recipe_info(name).default_world_size or pp == 1
    assert plan.warnings == ()
    assert (m.seq_length, c.train.global_batch_size, c.train.micro_batch_size, c.train.train_iters) == run
    o, s = c.optimizer, c.scheduler
    assert (o.optimizer, o.lr, o.min_lr, s.lr_warmup_iters, s.lr_decay_style) == (
        "adam",
        3e-4,
        3e-5,
        2000,
        "cosine",
    )
    if per_rank:
        assert plan.pipeline.stage_layers == per_rank


@pytest.mark.parametrize("name", list(FINETUNE))
def test_finetuning_recipe_validates_on_its_gpu_count(name, tmp_path):
    ep, targets = FINETUNE[name]
    data = tmp_path / "train.jsonl"
    data.write_text('{"input": "a", "output": "b"}\n')
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("0")
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "<eos>"}')
    start = [
        f"dataset.data_paths=[{data}]",
        f"checkpoint.pretrained_checkpoint={ckpt}",
        f"tokenizer.tokenizer_model={tmp_path}",
    ]
    cfg, _ = compose(get_recipe(name)(), overrides=start)
    if V2_LITE_REFUSED:
        with pytest.raises(ConfigError, match="QKNormConfigResolver"):
            cfg.validate(recipe_info(name).default_world_size, cuda=True)
        return
    plan = cfg.validate(recipe_info(name).default_world_size, cuda=True)
    assert plan.config.model.expert_model_parallel_size == ep
    peft = plan.config.peft
    assert (None if peft.scheme is None else peft.target_modules) == targets
    assert plan.config.optimizer.lr == (5e-6 if targets is None else 1e-4)


def _run_recipe_main():
    script = Path(__file__).resolve().parents[2] / "scripts" / "training" / "run_recipe.py"
    spec = importlib.util.spec_from_file_location("run_recipe_for_deepseek", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize("name", list(PRETRAIN))
def test_dry_run_on_the_published_gpu_count(name):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _run_recipe_main()(
            ["--recipe", name, "--dry-run", "--world-size", str(recipe_info(name).default_world_size)]
        )
    if "v2_lite" in name and V2_LITE_REFUSED:
        assert code == 2 and "QKNormConfigResolver" in err.getvalue()
        return
    assert code == 0, err.getvalue()[-2000:]
    tp, pp, ep, *_ = PRETRAIN[name]
    assert f"# layout: TP={tp} PP={pp} CP=1 EP={ep} " in out.getvalue()
    if PRETRAIN[name][5]:
        assert f"layers per rank {PRETRAIN[name][5]}\n" in out.getvalue()
