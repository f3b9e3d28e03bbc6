"""The DeepSeek-V3, Kimi-K2, DeepSeek-V2-Lite and Moonlight recipes (recipes/deepseek.py): Megatron-Bridge's
layouts and values, validated and dry-run (scripts/training/run_recipe.py --dry-run) on their published GPU
counts."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
from pathlib import Path

import pytest

from bridge.config.compose import compose
from bridge.config.environment import Environment
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.provider_checks import has_mla_qk_norm_resolver
from recipes import RECIPES, get_recipe, recipe_info
from recipes.dry_run import with_stand_ins

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
        "full",  # not Megatron-Bridge's None: without it a rank needs ~90.6 GB (test_recipe_memory_fits.py)
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
# Megatron-Bridge's Moonlight 4-GPU LoRA targets (recipes/moonlight/h100/moonlight_16b.py): every projection of
# multi-latent attention without query compression; bridge's own V2-Lite LoRA takes them too
MLA_LORA = ["linear_q_proj", "linear_kv_down_proj", "linear_kv_up_proj", "linear_proj"]
FINETUNE = {"deepseek_v2_lite_sft_config": (8, None), "deepseek_v2_lite_peft_config": (8, MLA_LORA)}
DEEPSEEK_RECIPES = (*PRETRAIN, *FINETUNE)
# megatron-core 0.19's multi-latent attention adds a query norm DeepSeek-V2-Lite does not have
V2_LITE_REFUSED = has_mla_qk_norm_resolver()


# the module's other recipes (Megatron-Bridge's aliases): DeepSeek-V2 and V3 on 32 nodes (test_recipe_registry.py)
OTHER_RECIPES = ("deepseek_v2_pretrain_config", "deepseek_v3_pretrain_config_32nodes")


# Moonlight-16B-A3B, read from Megatron-Bridge's recipes/moonlight/h100/moonlight_16b.py:
# name -> GPUs, (tp, pp, cp, ep, sp), layers per pipeline rank, (seq, global batch, micro batch, iters),
# (lr, adam eps, beta2, warm-up), recompute, DP gradients reduced in fp32
MOONLIGHT = {
    "moonlight_16b_pretrain_8gpu_h100_bf16_config": (
        8, (2, 1, 1, 8, True), None, (4096, 2048, 1, 500_000), (3e-4, 1e-8, 0.95, 2000), "selective", False,
    ),
    "moonlight_16b_pretrain_16gpu_h100_bf16_config": (
        16, (1, 1, 1, 8, False), None, (4096, 1024, 2, 100), (3e-4, 1e-8, 0.95, 40), None, False,
    ),
    "moonlight_16b_sft_8gpu_h100_bf16_config": (
        8, (4, 2, 1, 4, True), "14+13", (2048, 32, 1, 100), (5e-6, 1e-8, 0.95, 10), "selective", True,
    ),
    "moonlight_16b_sft_8gpu_h100_bf16_tp1_config": (
        8, (1, 1, 1, 8, False), None, (8192, 8, 1, 100), (5e-6, 1e-8, 0.95, 10), None, False,
    ),
    "moonlight_16b_sft_8gpu_h100_bf16_8k_config": (
        8, (2, 1, 2, 8, True), None, (8192, 128, 1, 20), (1e-6, 1e-5, 0.98, 2), "selective", False,
    ),
    "moonlight_16b_peft_2gpu_h100_bf16_config": (
        2, (1, 1, 1, 2, False), None, (4096, 128, 1, 1000), (1e-4, 1e-5, 0.98, 50), "selective", False,
    ),
    "moonlight_16b_peft_4gpu_h100_bf16_config": (
        4, (1, 1, 1, 4, False), None, (2048, 32, 1, 100), (1e-4, 1e-8, 0.95, 10), None, True,
    ),
}  # fmt: skip
MOONLIGHT_ALIASES = {
    "moonlight_16b_pretrain_config": "moonlight_16b_pretrain_16gpu_h100_bf16_config",
    "moonlight_16b_sft_config": "moonlight_16b_sft_8gpu_h100_bf16_tp1_config",
    "moonlight_16b_sft_8k_config": "moonlight_16b_sft_8gpu_h100_bf16_8k_config",
    "moonlight_16b_peft_config": "moonlight_16b_peft_4gpu_h100_bf16_config",
}
H100 = Environment(cuda=True, device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
                   packages={"transformer_engine": "2.8.0"})  # fmt: skip


def test_the_module_registers_these_recipes():
    module = sorted(n for n, info in RECIPES.items() if info.module == "deepseek")
    assert module == sorted(recipe_info(n).name for n in (*DEEPSEEK_RECIPES, *OTHER_RECIPES, *MOONLIGHT))
    assert [recipe_info(n).default_world_size for n in PRETRAIN] == [1024, 512, 8]


@pytest.mark.parametrize("name", list(PRETRAIN))
def test_pretraining_recipe_validates_on_its_gpu_count_with_published_values(name):
    tp, pp, ep, sp, layout, per_rank, run, recompute = PRETRAIN[name]
    cfg = get_recipe(name)()
    if "v2_lite" in name and V2_LITE_REFUSED:
        with pytest.raises(ConfigError, match="QKNormConfigResolver"):
            build_plan(cfg, recipe_info(name).default_world_size, cuda=True)
        return
    plan = build_plan(cfg, recipe_info(name).default_world_size, cuda=True)
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
            build_plan(cfg, recipe_info(name).default_world_size, cuda=True)
        return
    plan = build_plan(cfg, recipe_info(name).default_world_size, cuda=True)
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


@pytest.mark.parametrize("name", list(MOONLIGHT))
def test_moonlight_recipe_plans_megatron_bridges_values_on_its_gpu_count(name):
    gpus, layout, per_rank, run, optimizer, recompute, fp32_reduce = MOONLIGHT[name]
    info = recipe_info(name)
    assert info.default_world_size == gpus
    cfg = get_recipe(name)()
    if info.entry == "finetune":
        cfg = with_stand_ins(cfg)
    if V2_LITE_REFUSED:  # no query compression either (q_lora_rank None): refused as DeepSeek-V2-Lite
        with pytest.raises(ConfigError, match="QKNormConfigResolver"):
            build_plan(cfg, gpus, env=H100)
        return
    plan = build_plan(cfg, gpus, env=H100)
    m, c = plan.config.model, plan.config
    lay = (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.context_parallel_size)
    assert (*lay, m.expert_model_parallel_size, m.sequence_parallel) == layout
    assert plan.layout.world_size == gpus >= plan.layout.min_gpus
    if per_rank:
        assert plan.pipeline.stage_layers == per_rank
    assert (m.seq_length, c.train.global_batch_size, c.train.micro_batch_size, c.train.train_iters) == run
    o, s = c.optimizer, c.scheduler
    assert (o.lr, o.adam_eps, o.adam_beta2, s.lr_warmup_iters) == optimizer
    assert (s.start_weight_decay, s.end_weight_decay, o.weight_decay) == (0.033, 0.033, 0.1)
    assert (m.recompute_granularity, c.distributed.grad_reduce_in_fp32) == (recompute, fp32_reduce)
    assert (m.num_layers, m.num_moe_experts, m.q_lora_rank, m.vocab_size) == (27, 64, None, 163840)
    if name.endswith("_tp1_config"):  # its note: fp32 Adam state puts the estimate over an H100's 80 GB
        assert round(plan.memory.total) == 87 and "87 GB" in info.description


def test_moonlight_aliases_and_finetuning_details():
    for alias, canonical in MOONLIGHT_ALIASES.items():
        assert recipe_info(alias).name == canonical
    lora = get_recipe("moonlight_16b_peft_config")().peft
    assert (lora.dim, lora.alpha, lora.dropout, lora.target_modules) == (8, 16.0, 0.0, MLA_LORA)
    default_lora = get_recipe("moonlight_16b_peft_2gpu_h100_bf16_config")().peft
    assert (default_lora.dim, default_lora.alpha) == (32, 32.0)
    long = get_recipe("moonlight_16b_sft_8k_config")()
    # the loss over all the batch's tokens: no pre-averaging in the collective; packed rows padded to 2 * CP
    assert long.model.calculate_per_token_loss and not long.distributed.average_in_collective
    assert (long.dataset.packed_sequence_size, long.dataset.pad_seq_to_mult) == (8192, 4)
    assert get_recipe("moonlight_16b_sft_8gpu_h100_bf16_config")().dataset.pad_seq_to_mult == 4


@pytest.mark.skipif(V2_LITE_REFUSED, reason="megatron-core 0.19.2 refuses MLA without query compression")
def test_moonlight_hybrid_ep_dispatcher_needs_deep_ep():
    # Megatron-Core's HybridEP dispatcher imports deep_ep.HybridEPBuffer: without DeepEP the plan reports
    # the flex dispatcher inactive (the run keeps the all-to-all dispatcher)
    cfg = get_recipe("moonlight_16b_pretrain_config")()
    assert (cfg.model.moe_token_dispatcher_type, cfg.model.moe_flex_dispatcher_backend) == (
        "flex",
        "hybridep",
    )
    states = {s.field: s for s in build_plan(cfg, 16, env=H100).performance}
    assert not states["moe_token_dispatcher_type"].active
    assert "deep_ep" in states["moe_token_dispatcher_type"].reason
    with_deep_ep = dataclasses.replace(H100, packages={**H100.packages, "deep_ep": "1.2.1"})
    states = {s.field: s for s in build_plan(cfg, 16, env=with_deep_ep).performance}
    assert states["moe_token_dispatcher_type"].active
