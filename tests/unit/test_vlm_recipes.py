"""The vision-language finetuning recipes (recipes/qwen25_vl.py, recipes/ministral3.py): Megatron-Bridge's
published values (recipes/qwen_vl/h100/qwen25_vl.py, recipes/ministral3/h100/ministral3.py), validated at
their published GPU counts with image-text data."""

from __future__ import annotations

import pytest

from bridge.config.run_plan import build_plan
from recipes import get_recipe, recipe_info
from tests.unit.test_finetune_recipes import start_overrides

# name -> (GPUs, tp, pp, layers, hidden, lr, min_lr, LoRA)
PUBLISHED = {
    "qwen25_vl_3b_sft_config": (1, 1, 1, 36, 2048, 5e-6, 1e-6, False),
    "qwen25_vl_7b_sft_config": (2, 2, 1, 28, 3584, 5e-6, 1e-6, False),
    "qwen25_vl_32b_sft_config": (16, 8, 2, 64, 5120, 5e-6, 1e-6, False),
    "qwen25_vl_72b_sft_config": (32, 8, 4, 80, 8192, 5e-6, 1e-6, False),
    "qwen25_vl_3b_peft_config": (1, 1, 1, 36, 2048, 1e-4, 1e-5, True),
    "qwen25_vl_7b_peft_config": (1, 1, 1, 28, 3584, 1e-4, 1e-5, True),
    "qwen25_vl_32b_peft_config": (1, 1, 1, 64, 5120, 1e-4, 1e-5, True),
    "qwen25_vl_72b_peft_config": (1, 1, 1, 80, 8192, 1e-4, 1e-5, True),
}


@pytest.fixture()
def start(tmp_path):
    """What validation checks exists: an image-text JSONL file, a pretrained folder, a tokenizer folder."""
    line = '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}'
    return start_overrides(tmp_path, "vlm.jsonl", line)


def _planned_at_published_gpus(name: str, gpus: int, start: list[str]):
    """(model, config) of the recipe's plan at its published GPU count, whose name it carries."""
    from bridge.config.compose import compose

    info = recipe_info(name)
    assert info.default_world_size == gpus and info.name == name.replace(
        "_config", f"_{gpus}gpu_h100_bf16_config"
    )
    cfg, _ = compose(get_recipe(name)(), overrides=start)
    plan = build_plan(cfg, gpus, cuda=True)
    return plan.config.model, plan.config


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_vlm_recipe_has_published_values_and_validates(name, start):
    gpus, tp, pp, layers, hidden, lr, min_lr, lora = PUBLISHED[name]
    m, c = _planned_at_published_gpus(name, gpus, start)
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.num_layers, m.hidden_size) == (
        tp, pp, layers, hidden,
    )  # fmt: skip
    assert (m.position_embedding_type, m.mrope_section) == ("mrope", [16, 24, 24])
    assert m.freeze_vision_model is False and m.freeze_vision_projection is False
    assert (c.dataset.kind, c.dataset.packed_sequence_size, m.seq_length) == ("vlm", 0, 4096)
    t, o, s = c.train, c.optimizer, c.scheduler
    assert (t.global_batch_size, t.micro_batch_size, t.train_iters) == (32, 2, 300_000)
    assert (o.lr, o.min_lr, o.adam_beta2, o.use_distributed_optimizer) == (lr, min_lr, 0.95, True)
    assert (s.lr_warmup_iters, s.lr_decay_iters, c.validation.eval_interval) == (500, 300_000, 500)
    assert (c.peft.scheme == "lora") is lora


# Ministral 3 (recipes/ministral3.py; Megatron-Bridge's recipes/ministral3/h100/ministral3.py):
# name -> (GPUs, tp, layers, hidden, tied embeddings, RoPE base, lr, min_lr, LoRA)
MINISTRAL3 = {
    "ministral3_3b_sft_config": (1, 1, 26, 3072, True, 1e6, 5e-6, 5e-7, False),
    "ministral3_8b_sft_config": (2, 2, 34, 4096, False, 1e6, 5e-6, 5e-7, False),
    "ministral3_14b_sft_config": (4, 4, 40, 5120, False, 1e9, 5e-6, 5e-7, False),
    "ministral3_3b_peft_config": (1, 1, 26, 3072, True, 1e6, 2e-4, 2e-5, True),
    "ministral3_8b_peft_config": (1, 1, 34, 4096, False, 1e6, 2e-4, 2e-5, True),
    "ministral3_14b_peft_config": (2, 2, 40, 5120, False, 1e9, 2e-4, 2e-5, True),
}


@pytest.mark.parametrize("name", sorted(MINISTRAL3))
def test_ministral3_recipe_has_published_values_and_validates(name, start):
    gpus, tp, layers, hidden, tied, base, lr, min_lr, lora = MINISTRAL3[name]
    m, c = _planned_at_published_gpus(name, gpus, start)
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.num_layers, m.hidden_size) == (
        tp, 1, layers, hidden,
    )  # fmt: skip
    assert (m.share_embeddings_and_output_weights, m.rotary_base) == (tied, base)
    assert (m.yarn_rope_factor, m.llama4_attn_scale_beta) == (16.0, 0.1)
    assert m.vlm_config["vision_config"]["num_hidden_layers"] == 24
    assert m.freeze_vision_model is False and m.freeze_vision_projection is False
    assert m.freeze_language_model is False
    assert (c.dataset.kind, c.dataset.packed_sequence_size, m.seq_length) == ("vlm", 0, 4096)
    t, o, s = c.train, c.optimizer, c.scheduler
    assert (t.global_batch_size, t.micro_batch_size, t.train_iters) == (32, 1, 50)
    assert (o.lr, o.min_lr, o.adam_beta2, o.use_distributed_optimizer) == (lr, min_lr, 0.95, True)
    assert (s.lr_warmup_iters, s.lr_decay_iters) == (10, 50)
    assert (c.validation.eval_interval, c.validation.eval_iters, c.checkpoint.save_interval) == (5, 10, 50)
    assert c.rng.seed == 1234 and (c.peft.scheme == "lora") is lora
