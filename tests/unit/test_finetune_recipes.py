"""The finetuning recipes: Megatron-Bridge's published values, validated at their default world size."""

from __future__ import annotations

import pytest

from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from recipes import RECIPES, get_recipe, recipe_info

# recipes/deepseek.py's finetuning recipes: test_deepseek_recipes.py
FINETUNE = sorted(
    name for name, info in RECIPES.items() if info.entry == "finetune" and info.module != "deepseek"
)
# name -> (tp, ep, sp, seq_length, global batch, train_iters, lr, peft (scheme, dim, alpha, targets) or None)
ALL4 = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
ATTN = ["linear_qkv", "linear_proj"]
PUBLISHED = {
    "llama32_1b_sft_config": (1, 1, False, 4096, 8, 1000, 5e-6, None),
    "llama32_1b_peft_config": (1, 1, False, 4096, 8, 1000, 1e-4, ("lora", 32, 32.0, ALL4)),
    "llama31_8b_sft_config": (2, 1, False, 4096, 8, 1000, 5e-6, None),
    "llama31_8b_peft_config": (1, 1, False, 4096, 8, 1000, 1e-4, ("lora", 8, 16.0, ALL4)),
    "qwen3_8b_sft_config": (4, 1, False, 2048, 32, 100, 5e-6, None),
    "qwen3_8b_peft_config": (1, 1, False, 2048, 32, 100, 1e-4, ("lora", 8, 16.0, ATTN)),
    "qwen3_30b_a3b_sft_config": (1, 16, False, 2048, 32, 100, 5e-6, None),
    "qwen3_30b_a3b_peft_config": (4, 4, True, 2048, 32, 100, 1e-4, ("lora", 8, 16.0, ATTN)),
}


# Megatron-Bridge's Qwen3 8B and Qwen3-30B-A3B finetuning recipes use beta2 0.95 (the base's is 0.98)
BETA2_095 = {n for n in PUBLISHED if n.startswith(("qwen3_8b", "qwen3_30b_a3b"))}


def test_every_listed_recipe_is_a_finetuning_recipe():
    assert {recipe_info(n).name for n in PUBLISHED} <= set(FINETUNE)


def start_overrides(tmp_path, data_name: str, data_line: str) -> list[str]:
    """A data file, a (torch_dist-shaped) pretrained folder and a tokenizer folder: validation checks they
    exist and are not empty, and that the tokenizer declares an eos token."""
    data = tmp_path / data_name
    data.write_text(data_line + "\n")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("0")
    # validation reads the tokenizer folder's files: an eos token must be declared
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "<eos>"}')
    return [
        f"dataset.data_paths=[{data}]",
        f"checkpoint.pretrained_checkpoint={ckpt}",
        f"tokenizer.tokenizer_model={tmp_path}",
    ]


@pytest.fixture()
def start(tmp_path):
    return start_overrides(tmp_path, "train.jsonl", '{"input": "a", "output": "b"}')


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_finetuning_recipe_has_published_values_and_validates(name, start):
    from bridge.config.compose import compose

    tp, ep, sp, seq, gbs, iters, lr, peft = PUBLISHED[name]
    cfg, _ = compose(get_recipe(name)(), overrides=start)
    plan = build_plan(cfg, recipe_info(name).default_world_size, cuda=True)
    m, c = plan.config.model, plan.config
    assert (m.tensor_model_parallel_size, m.expert_model_parallel_size, m.sequence_parallel) == (tp, ep, sp)
    assert (m.seq_length, c.dataset.packed_sequence_size, c.train.micro_batch_size) == (seq, seq, 1)
    assert (c.train.global_batch_size, c.train.train_iters, c.optimizer.lr, c.optimizer.min_lr) == (
        gbs,
        iters,
        lr,
        0.0,
    )
    beta2 = 0.95 if name in BETA2_095 else 0.98
    assert (c.optimizer.adam_beta2, c.rng.seed, c.mixed_precision.precision) == (beta2, 5678, "bf16_mixed")
    assert (c.optimizer.adam_eps, c.scheduler.start_weight_decay, c.scheduler.end_weight_decay) == (
        1e-8,
        0.033,
        0.033,
    )
    assert c.tokenizer.tokenizer_type == "HuggingFaceTokenizer" and c.dataset.kind == "sft"
    p = c.peft
    assert (None if p.scheme is None else (p.scheme, p.dim, p.alpha, p.target_modules)) == peft


@pytest.mark.parametrize("name", ["llama32_1b_peft_config", "qwen3_8b_peft_config"])
def test_dora_through_the_recipe_keyword(name):
    assert get_recipe(name)(peft_scheme="dora").peft.scheme == "dora"


def test_moe_expert_targets_on_grouped_gemm_experts_are_refused(start):
    """On a GPU the recipe's grouped-GEMM experts (model.moe_grouped_gemm=true) take no adapters; on CPU the
    same experts run as one linear each and take them (bridge.config.finetune_rules)."""
    from bridge.config.compose import compose

    cfg, _ = compose(
        get_recipe("qwen3_30b_a3b_peft_config")(),
        overrides=[*start, "peft.target_modules=[linear_qkv,linear_fc1]"],
    )
    from tests.unit.test_recipe_registry import H100  # Transformer Engine present: grouped GEMMs active

    with pytest.raises(ConfigError, match=r"peft.target_modules = .*linear_fc1 adapt every routed expert.*"
                                          "grouped-GEMM weights"):  # fmt: skip
        build_plan(cfg, 4, env=H100)
    build_plan(cfg, 4, cuda=False)  # on CPU: sequential experts
