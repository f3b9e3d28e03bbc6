"""Recipes: every one resolves and validates at its stated world size with the published values."""

from __future__ import annotations

import os

import pytest

from bridge.config.compose import compose
from bridge.config.container import ConfigContainer
from bridge.config.layout import run_layout
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from recipes import ALIASES, RECIPES, get_recipe, list_recipes, recipe_info

# name -> (tp, pp, vpp, cp, ep, sp, model preset values checked: layers, hidden, experts, topk)
PUBLISHED_LAYOUTS = {
    "llama32_1b_pretrain_config": (1, 1, None, 1, 1, False, 16, 2048, None, None),
    "llama32_3b_pretrain_config": (1, 1, None, 1, 1, False, 28, 3072, None, None),
    "llama31_8b_pretrain_config": (1, 1, None, 2, 1, False, 32, 4096, None, None),
    "llama31_70b_pretrain_config": (4, 4, 5, 2, 1, True, 80, 8192, None, None),
    "qwen3_8b_pretrain_4gpu_h100_bf16_config": (4, 1, None, 1, 1, False, 36, 4096, None, None),
    "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config": (4, 2, None, 1, 4, True, 48, 2048, 128, 8),
    "mixtral_8x7b_pretrain_config": (1, 4, 8, 1, 8, False, 32, 4096, 8, 2),
    "gemma2_2b_pretrain_config": (2, 1, None, 1, 1, False, 26, 2304, None, None),
    "gemma2_9b_pretrain_config": (8, 1, None, 1, 1, False, 42, 3584, None, None),
    "gemma2_27b_pretrain_config": (8, 2, None, 1, 1, False, 46, 4608, None, None),
}
# name -> (seq_length, global batch, micro batch, train_iters, warmup) where a recipe runs Megatron-Bridge's
# pretraining base (_pretrain_common) rather than Llama 3's long run
PUBLISHED_RUNS = {
    name: (4096, 32, 2, 300_000, 500)
    for name in (
        "gemma2_2b_pretrain_config",
        "gemma2_9b_pretrain_config",
        "gemma2_27b_pretrain_config",
        "qwen3_8b_pretrain_4gpu_h100_bf16_config",
        "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
    )
}


def test_registry_lists_every_recipe_with_a_description():
    names = [name for name, _ in list_recipes()]
    pretraining = {n for n in names if RECIPES[n].entry == "pretrain"}  # finetuning: test_finetune_recipes.py
    # bridge's earlier names answer as aliases of Megatron-Bridge's canonical names
    assert {recipe_info(n).name for n in PUBLISHED_LAYOUTS} <= pretraining and len(set(names)) == len(names)
    assert not set(ALIASES) & set(RECIPES)
    assert {RECIPES[n].entry for n in names} == {"pretrain", "finetune"}
    assert all(description for _, description in list_recipes())


def test_unknown_recipe_suggests_close_names():
    with pytest.raises(ConfigError, match=r"no such recipe. Fix: did you mean llama32_1b_pretrain_config"):
        get_recipe("llama32_1b_pretrain")


@pytest.mark.parametrize("name", list(PUBLISHED_LAYOUTS))
def test_recipe_validates_at_its_default_world_size_with_published_values(name):
    cfg = get_recipe(name)()
    assert isinstance(cfg, ConfigContainer)
    world = recipe_info(name).default_world_size
    plan = build_plan(cfg, world, cuda=True)
    assert plan.warnings == ()
    layout = plan.layout
    assert world >= layout.min_gpus

    tp, pp, vpp, cp, ep, sp, layers, hidden, experts, topk = PUBLISHED_LAYOUTS[name]
    m = cfg.model
    assert (
        m.tensor_model_parallel_size,
        m.pipeline_model_parallel_size,
        m.virtual_pipeline_model_parallel_size,
        m.context_parallel_size,
        m.expert_model_parallel_size,
        m.sequence_parallel,
    ) == (tp, pp, vpp, cp, ep, sp)
    assert (m.num_layers, m.hidden_size, m.num_moe_experts) == (layers, hidden, experts)
    if topk is not None:
        assert m.moe_router_topk == topk

    # published pretraining values (issue 3)
    seq, gbs, mbs, iters, warmup = PUBLISHED_RUNS.get(name, (8192, 512, 1, 1_168_251, 2000))
    assert m.seq_length == seq and plan.config.dataset.seq_length == seq and plan.data.seq_length == seq
    assert (cfg.train.global_batch_size, cfg.train.micro_batch_size, cfg.train.train_iters) == (
        gbs,
        mbs,
        iters,
    )
    o = cfg.optimizer
    assert (o.optimizer, o.lr, o.min_lr, o.weight_decay, o.adam_beta1, o.adam_beta2, o.clip_grad) == (
        "adam",
        3e-4,
        3e-5,
        0.1,
        0.9,
        0.95,
        1.0,
    )
    assert o.use_distributed_optimizer is True and o.adam_eps == 1e-8  # Megatron-Bridge #2184
    s = cfg.scheduler
    assert (s.lr_decay_style, s.lr_warmup_iters, s.lr_decay_iters) == ("cosine", warmup, None)
    # the weight decay that trains: the scheduler's constant 0.033 (Megatron-Core's get_wd every step)
    assert (s.start_weight_decay, s.end_weight_decay, s.weight_decay_incr_style) == (0.033, 0.033, "constant")
    assert cfg.mixed_precision.precision == "bf16_mixed"
    assert cfg.checkpoint.ckpt_format == "torch_dist"
    assert cfg.dataset.kind == "mock" and cfg.dataset.data_paths == []
    tok = plan.config.tokenizer
    assert tok.tokenizer_type == "NullTokenizer" and tok.vocab_size == m.vocab_size - 1
    assert cfg.distributed.strategy == "megatron"


def test_moe_recipes_use_expert_parallelism():
    for name in ("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", "mixtral_8x7b_pretrain_config"):
        cfg = get_recipe(name)()
        assert cfg.model.expert_model_parallel_size > 1
        assert cfg.model.num_moe_experts % cfg.model.expert_model_parallel_size == 0


def test_70b_uses_interleaved_multi_node_layout():
    cfg = get_recipe("llama31_70b_pretrain_config")()
    layout = run_layout(cfg, 64)
    assert layout.min_gpus == 32 and layout.gpus_per_node == 8 and layout.interleaved
    assert layout.describe() == "TP=4 PP=4 CP=2 EP=1 ETP=1 DP=2 EDP=16 world=64 VPP=5 SP"


def test_recipe_keyword_arguments(tmp_path):
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    # a real index: the plan reads its document count (every split the run reads needs documents)
    builder = IndexedDatasetBuilder(str(tmp_path / "d.bin"), dtype=np.uint16)
    for _ in range(1000):
        builder.add_document(torch.arange(8, dtype=torch.int64), [8])
    builder.finalize(str(tmp_path / "d.idx"))
    cfg = get_recipe("llama32_1b_pretrain_config")(
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2,
        sequence_parallel=True,
        seq_length=4096,
        dir=str(tmp_path),
        name="run1",
        data_paths=[str(tmp_path / "d")],
        train_iters=100,
        global_batch_size=8,
        micro_batch_size=2,
        lr=1e-4,
        min_lr=1e-5,
        lr_warmup_iters=10,
    )
    plan = build_plan(cfg, 8, cuda=True)
    assert plan.warnings == ()
    assert plan.layout.describe() == "TP=2 PP=2 CP=1 EP=1 ETP=1 DP=2 EDP=4 world=8 SP"
    assert plan.config.dataset.seq_length == 4096 and cfg.dataset.kind == "indexed"
    assert cfg.checkpoint.save == os.path.join(str(tmp_path), "run1", "checkpoints")
    assert cfg.logger.tensorboard_dir == os.path.join(str(tmp_path), "run1", "tb_logs")
    assert (cfg.train.train_iters, cfg.train.global_batch_size, cfg.train.micro_batch_size) == (100, 8, 2)
    assert (cfg.optimizer.lr, cfg.optimizer.min_lr, cfg.scheduler.lr_warmup_iters) == (1e-4, 1e-5, 10)
    with pytest.raises(TypeError):
        get_recipe("llama32_1b_pretrain_config")(tensor_parallel=2)


def test_recipes_are_independent_objects():
    a = get_recipe("llama32_1b_pretrain_config")()
    a.model.num_layers = 2
    assert get_recipe("llama32_1b_pretrain_config")().model.num_layers == 16


def test_seeds_verification_overrides_validate_on_four_ranks():
    # the README's "Training on GPUs" command (the training functional test runs it for real)
    overrides = [
        "model.tensor_model_parallel_size=2",
        "model.pipeline_model_parallel_size=2",
        "model.sequence_parallel=True",
        "train.train_iters=3",
        "train.global_batch_size=8",
        "train.micro_batch_size=1",
        "scheduler.lr_warmup_iters=0",
        "validation.eval_iters=0",
        "validation.eval_interval=0",
        "checkpoint.save_interval=0",
        "logger.log_interval=1",
    ]
    cfg, _ = compose(get_recipe("llama32_1b_pretrain_config")(), overrides=overrides)
    assert build_plan(cfg, 4, cuda=True).warnings == ()
    assert run_layout(cfg, 4).describe() == "TP=2 PP=2 CP=1 EP=1 ETP=1 DP=1 EDP=2 world=4 SP"
