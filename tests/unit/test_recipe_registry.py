"""The recipe registry against Megatron-Bridge's published recipe set (names read from its source:
tests/unit/data/megatron_bridge_recipes.json): every name resolves, every recipe dry-runs in-process on
its published GPU count, --list-recipes groups and filters, and docs/recipes.md is what the registry
generates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.config.environment import Environment
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.provider_checks import has_mla_qk_norm_resolver
from recipes import ALIASES, RECIPES, get_recipe, recipe_info
from recipes.dry_run import missing_inputs, with_stand_ins
from recipes.listing import list_lines

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = json.loads((Path(__file__).parent / "data" / "megatron_bridge_recipes.json").read_text())
# published recipes not in the registry yet, each with its reason in docs/recipes.md ("Not here yet")
# Megatron-Bridge's LoRA recipes of the hybrids adapt the Mamba in/out projections, which bridge's LoRA
# does not target yet (bridge.config.finetune_rules refuses adapters on a hybrid)
NOT_YET: set[str] = {
    "nemotronh_4b_peft_1gpu_h100_bf16_config", "nemotronh_8b_peft_1gpu_h100_bf16_config",
    "nemotronh_47b_peft_4gpu_h100_bf16_config", "nemotronh_56b_peft_4gpu_h100_bf16_config",
    "nemotron_nano_9b_v2_peft_1gpu_h100_bf16_config", "nemotron_nano_12b_v2_peft_1gpu_h100_bf16_config",
    "nemotron_3_nano_peft_8gpu_h100_bf16_config",
    # Nemotron 3 Super: Megatron-Bridge reads its sizes from the hub (none in its source, so no preset),
    # and its multi-token-prediction layers do not convert (num_nextn_predict_layers is refused)
    "nemotron_3_super_pretrain_16gpu_h100_bf16_config", "nemotron_3_super_sft_16gpu_h100_bf16_config",
    "nemotron_3_super_sft_16gpu_h100_bf16_32k_config", "nemotron_3_super_peft_1gpu_h100_bf16_config",
    "nemotron_3_super_peft_16gpu_h100_bf16_config",
    # K-EXAONE 2.0 750B: no published config.json yet
    "exaone_moe_2_0_750b_a37_pretrain_512gpu_h100_bf16_config",
    "exaone_moe_2_0_750b_a37_sft_512gpu_h100_bf16_config",
    "exaone_moe_2_0_750b_a37_peft_128gpu_h100_bf16_config",
    # Megatron-Energon (webdataset shards with a task encoder): bridge reads image-text conversations from
    # .jsonl / .json / .parquet files and datasets folders (dataset.kind=vlm), not Energon datasets
    "qwen3_vl_8b_peft_1gpu_h100_bf16_energon_config",
}  # fmt: skip
# recipes Megatron-Bridge does not publish (no GPU count in their names): NeMo's Mixtral, DeepSeek-V2-Lite's
# finetuning
BRIDGE_ONLY = {
    "mixtral_8x7b_pretrain_config",
    "deepseek_v2_lite_sft_config",
    "deepseek_v2_lite_peft_config",
    # DPO (issue 48): Megatron-Bridge publishes none
    "llama32_1b_dpo_config",
    "llama3_8b_dpo_config",
    "llama31_8b_dpo_config",
    # distillation (issue 48): Megatron-Bridge's is an example script, not a registered recipe
    "llama32_1b_distill_config",
    "llama31_8b_distill_config",
}
# the recipes Megatron-Bridge publishes with Adam eps 1e-5 (its others: 1e-8)
PUBLISHED_EPS_1E5 = {"moonlight_16b_sft_8gpu_h100_bf16_8k_config", "moonlight_16b_peft_2gpu_h100_bf16_config"}
# multi-latent attention without query compression: megatron-core 0.19.2 refuses it (test_deepseek_recipes.py)
NO_QUERY_COMPRESSION = ("deepseek_v2_lite", "moonlight_16b")
H100 = Environment(
    cuda=True, device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
    packages={"transformer_engine": "2.8.0"},
)  # fmt: skip
B200 = Environment(
    cuda=True, device_name="NVIDIA B200", compute_capability=(10, 0), packages={"transformer_engine": "2.8.0"}
)


def test_every_published_name_resolves_to_its_recipe():
    published = set(PUBLISHED["recipes"])
    assert NOT_YET <= published and len(published) == 209
    assert published - NOT_YET <= set(RECIPES)
    for alias, canonical in PUBLISHED["aliases"].items():
        if canonical in NOT_YET:
            assert alias not in ALIASES
            continue
        assert recipe_info(alias).name == canonical, alias
    # the registry's names beyond Megatron-Bridge's: bridge's own recipes only
    assert set(RECIPES) - published == BRIDGE_ONLY
    assert set(ALIASES) <= set(PUBLISHED["aliases"])


def test_every_recipe_dry_runs_on_its_published_gpu_count():
    """In-process and for every recipe (about 100, a second or two): the plan a dry run prints. Finetuning
    recipes plan without their data, tokenizer and checkpoint, and say what is still needed."""
    for name, info in RECIPES.items():
        cfg = get_recipe(name)()
        env = B200 if cfg.mixed_precision.precision == "bf16_with_mxfp8_mixed" else H100
        if info.entry == "finetune":
            assert missing_inputs(cfg), name
        if missing_inputs(cfg, finetuning=info.entry == "finetune"):  # a finetune's, or mock_vlm's processor
            cfg = with_stand_ins(cfg)
        if name.startswith(NO_QUERY_COMPRESSION) and has_mla_qk_norm_resolver():  # refused
            with pytest.raises(ConfigError, match="QKNormConfigResolver"):
                build_plan(cfg, info.default_world_size, env=env)
            continue
        plan = build_plan(cfg, info.default_world_size, env=env)
        assert plan.layout.world_size == info.default_world_size >= plan.layout.min_gpus, name
        row = info.row
        if row is None:  # a hand-written recipe (no table row): its own tests check its values
            continue
        assert (info.family, info.kind) == (row.family, row.kind) and info.kind in name, name
        assert f"{info.default_world_size}gpu" in name or name in BRIDGE_ONLY, name
        lay = row.layout_values()
        m = plan.config.model
        assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.context_parallel_size) == (
            lay["tp"],
            lay["pp"],
            lay["cp"],
        ), name
        assert (m.expert_model_parallel_size, m.sequence_parallel) == (lay["ep"], lay["sp"]), name
        o, s = plan.config.optimizer, plan.config.scheduler
        eps = 1e-5 if name in PUBLISHED_EPS_1E5 else 1e-8
        assert (o.adam_eps, s.start_weight_decay, s.end_weight_decay) == (eps, 0.033, 0.033), name


def test_mxfp8_is_refused_on_h100_as_its_note_says():
    from bridge.errors import ConfigError

    name = "llama3_8b_pretrain_2gpu_h100_fp8mx_config"
    assert "Blackwell" in recipe_info(name).description
    with pytest.raises(ConfigError, match="mixed_precision.precision"):
        build_plan(get_recipe(name)(), 2, env=H100)


@pytest.mark.parametrize(
    "name, values",
    [
        # Megatron-Bridge's values, read from its recipes (one per kind of difference)
        (
            "llama3_8b_pretrain_32gpu_h100_bf16_64k_config",
            dict(seq=65536, gbs=512, iters=1_168_251, warm=2000),
        ),
        ("llama3_8b_low_precision_pretrain_config", dict(seq=8192, gbs=768, lr=6e-4, min_lr=6e-6)),
        ("qwen3_8b_pretrain_4gpu_h100_bf16_config", dict(seq=4096, gbs=32, mbs=2, iters=300_000, warm=500)),
        ("qwen3_8b_pretrain_16gpu_h100_bf16_config", dict(gbs=1024, mbs=1, iters=100, warm=40, decay=100)),
        ("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", dict(seq=4096, gbs=32, recompute="full")),
        ("gemma2_2b_pretrain_config", dict(seq=4096, gbs=32, mbs=2, iters=300_000, warm=500)),
        ("qwen3_8b_sft_config", dict(seq=2048, gbs=32, iters=100, beta2=0.95, warm=10)),
        ("qwen3_30b_a3b_sft_config", dict(iters=100, beta2=0.95, ep=16)),
        ("qwen25_72b_sft_config", dict(seq=2048, gbs=128, iters=100, beta2=0.95, tp=8, pp=4)),
        ("qwen3_32b_peft_config", dict(seq=2048, gbs=8, iters=1000, beta2=0.98, recompute="full", dim=32)),
        ("llama3_70b_peft_config", dict(seq=4096, gbs=8, tp=8, dim=16, alpha=32.0)),
        ("gemma3_1b_peft_config", dict(seq=4096, gbs=32, dim=8, alpha=16.0)),
        ("qwen3_600m_sft_128k_config", dict(seq=131072, gbs=2, cp=8, lr=1e-6, min_lr=1e-6)),
        ("llama31_405b_peft_config", dict(seq=2048, gbs=32, tp=4, pp=8, dim=16, alpha=32.0)),
        ("qwen3_235b_a22b_pretrain_config", dict(seq=4096, gbs=32, mbs=1, tp=4, pp=16, cp=2, ep=8)),
        ("qwen3_600m_sft_yarn_128k_config", dict(seq=131072, gbs=8, cp=8, lr=1e-6, min_lr=1e-6)),
        ("deepseek_v3_pretrain_config_32nodes", dict(gbs=4096, mbs=1, pp=8, ep=32, recompute="full")),
        (
            "gpt_oss_120b_sft_32k_config",
            dict(seq=32768, gbs=4, tp=2, pp=6, cp=4, ep=4, recompute="selective"),
        ),
        ("glm45_355b_pretrain_config", dict(gbs=2048, iters=1_000_000, lr=1e-4, min_lr=1e-5, warm=2000)),
        ("olmoe_7b_sft_config", dict(seq=4096, gbs=128, iters=1000, beta2=0.95, decay=1000, ep=8)),
        ("exaone4_1p2b_peft_config", dict(seq=2048, gbs=128, iters=1000, lr=1e-4, dim=32)),
        ("moonlight_16b_pretrain_8gpu_h100_bf16_config", dict(seq=4096, gbs=2048, iters=500_000, warm=2000)),
        (
            "moonlight_16b_pretrain_config",
            dict(gbs=1024, mbs=2, iters=100, warm=40, tp=1, ep=8, recompute=None),
        ),
        (
            "moonlight_16b_sft_8gpu_h100_bf16_config",
            dict(seq=2048, gbs=32, iters=100, beta2=0.95, tp=4, pp=2),
        ),
        ("moonlight_16b_sft_config", dict(seq=8192, gbs=8, iters=100, lr=5e-6, tp=1, ep=8, recompute=None)),
        ("moonlight_16b_sft_8k_config", dict(seq=8192, gbs=128, iters=20, lr=1e-6, beta2=0.98, cp=2, warm=2)),
        ("moonlight_16b_peft_2gpu_h100_bf16_config", dict(seq=4096, gbs=128, iters=1000, decay=1000, dim=32)),
        ("moonlight_16b_peft_config", dict(seq=2048, gbs=32, iters=100, warm=10, ep=4, dim=8, alpha=16.0)),
    ],
)
def test_published_values(name, values):
    cfg = get_recipe(name)()
    m, t, o, s, p = cfg.model, cfg.train, cfg.optimizer, cfg.scheduler, cfg.peft
    have = dict(
        seq=m.seq_length, gbs=t.global_batch_size, mbs=t.micro_batch_size, iters=t.train_iters,
        warm=s.lr_warmup_iters, decay=s.lr_decay_iters, lr=o.lr, min_lr=o.min_lr, beta2=o.adam_beta2,
        tp=m.tensor_model_parallel_size, pp=m.pipeline_model_parallel_size, cp=m.context_parallel_size,
        ep=m.expert_model_parallel_size, recompute=m.recompute_granularity, dim=p.dim, alpha=p.alpha,
    )  # fmt: skip
    assert {k: have[k] for k in values} == values


def test_list_groups_by_family_and_kind_and_filters():
    lines = list_lines(RECIPES.values(), "qwen3")
    headers = [line for line in lines if line.startswith("# ")]
    assert headers[0] == "# qwen3 pretrain (7)" and "# qwen3_moe peft (2)" in headers
    assert all(line.startswith(("# ", "qwen3")) for line in lines)
    assert len(lines) - len(headers) == sum("qwen3" in n for n in RECIPES)
    peft_families = {i.family for i in RECIPES.values() if i.kind == "peft"}  # one group each
    assert [h.split()[2] for h in list_lines(RECIPES.values(), "peft") if h.startswith("# ")] == [
        "peft"
    ] * len(peft_families)
    # llama, qwen2, qwen3, qwen3_moe, gemma2, gemma3, gemma3_vl, deepseek, gpt_oss, glm4_moe, olmoe, exaone4,
    # exaone_moe, qwen25_vl, qwen3_vl, qwen3_vl_moe, mistral3 (Ministral 3)
    assert len(peft_families) == 17
    everything = list_lines(RECIPES.values())
    assert len([line for line in everything if not line.startswith("# ")]) == len(RECIPES)
    first = next(line for line in everything if line.startswith("llama32_1b_pretrain_1gpu_h100_bf16_config "))
    assert "TP1 PP1" in first and "[llama32_1b_pretrain_config]" in first


def test_finetuning_dry_run_without_data_warns_what_is_still_needed(capsys):
    sys.path.insert(0, str(ROOT / "scripts" / "training"))
    try:
        import run_recipe
    finally:
        sys.path.pop(0)
    assert run_recipe.main(["--recipe", "qwen3_8b_peft_config", "--dry-run", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    for field in ("dataset.data_paths", "tokenizer.tokenizer_model", "checkpoint.pretrained_checkpoint"):
        assert f"# warning: still needed: {field}:" in out
    assert "\n# layout: TP=1 PP=1 CP=1 EP=1 ETP=1 DP=1 EDP=1 world=1\n" in out
    assert "kind: sft" in out and "scheme: lora" in out  # the printed config is the recipe's, not a stand-in


def test_docs_table_is_generated_from_the_registry():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/dev/gen_recipes_doc.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr


def test_full_recompute_rows_agree_with_activation_checkpointing():
    """A row's full recompute (recompute_granularity full, uniform, 1 layer) is what
    distributed.activation_checkpointing means: both together validate; another recompute refuses."""
    from bridge.config.compose import compose
    from bridge.errors import ConfigError

    base = get_recipe("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config")
    cfg, _ = compose(base(), overrides=["distributed.activation_checkpointing=true"])
    assert build_plan(cfg, 8, env=H100).layout.describe() == "TP=4 PP=2 CP=1 EP=4 ETP=1 DP=1 EDP=1 world=8 SP"
    cfg, _ = compose(
        base(), overrides=["distributed.activation_checkpointing=true", "model.recompute_method=block"]
    )
    with pytest.raises(ConfigError, match="already chooses what to recompute"):
        build_plan(cfg, 8, env=H100)


@pytest.mark.parametrize(
    "name, gpus, stage_layers",
    [
        # Megatron-Core's account_for_embedding / loss split: (layers + 2) / stages each, E and L take one
        ("llama31_405b_sft_config", 128, "+".join(["7", *["8"] * 14, "7"])),
        ("qwen3_235b_a22b_pretrain_config", 256, "+".join(["5", *["6"] * 14, "5"])),
        ("qwen3_235b_a22b_peft_config", 16, "23+24+24+23"),
    ],
)
def test_largest_models_count_embedding_and_loss_as_pipeline_layers(name, gpus, stage_layers):
    cfg = get_recipe(name)()
    if recipe_info(name).entry == "finetune":
        cfg = with_stand_ins(cfg)
    plan = build_plan(cfg, gpus, env=H100)
    assert plan.pipeline.stage_layers == stage_layers
    assert "E+L in split" in recipe_info(name).description
