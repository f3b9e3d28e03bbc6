"""ConfigContainer: one sequence length, YAML round trip, and the cross-section validation rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bridge.config.compose import compose
from bridge.config.container import ConfigContainer
from bridge.config.layout import run_layout
from bridge.config.overrides import apply_overrides
from bridge.config.resolve import resolve_config
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider

REPO_ROOT = Path(__file__).resolve().parents[2]


def tiny(**model_fields) -> ConfigContainer:
    fields = dict(
        num_layers=4,
        hidden_size=64,
        num_attention_heads=4,
        num_query_groups=2,
        vocab_size=1024,
        seq_length=128,
    )
    fields.update(model_fields)
    cfg = ConfigContainer(model=GPTModelProvider(**fields))
    cfg.train.global_batch_size = 8
    cfg.train.train_iters = 10
    cfg.scheduler.lr_warmup_iters = 2
    return cfg


# ---- one source of truth -----------------------------------------------------------------------


def test_dataset_seq_length_follows_model_after_overrides():
    cfg, _ = compose(tiny(), overrides=["model.seq_length=64"])
    assert cfg.dataset.seq_length == 64 == cfg.model.seq_length


def test_dataset_seq_length_mismatch_names_the_field_to_set():
    with pytest.raises(ConfigError) as err:
        compose(tiny(), overrides=["dataset.seq_length=256"])
    msg = str(err.value)
    assert (
        "dataset.seq_length=256 differs from model.seq_length=128" in msg
        and "Set model.seq_length only" in msg
    )


def test_dataset_seq_length_equal_explicit_value_is_fine():
    cfg, _ = compose(tiny(), overrides=["dataset.seq_length=128"])
    assert cfg.dataset.seq_length == 128


def test_null_tokenizer_vocab_follows_model_and_model_follows_tokenizer():
    cfg = resolve_config(tiny())
    assert cfg.tokenizer.vocab_size == 1023  # + its EOD id = 1024 ids
    cfg = tiny(vocab_size=None)
    cfg.tokenizer.vocab_size = 500
    assert resolve_config(cfg).model.vocab_size == 501


# ---- YAML --------------------------------------------------------------------------------------


def test_yaml_round_trip_is_lossless():
    cfg = resolve_config(
        apply_overrides(
            tiny(),
            [
                "model.tensor_model_parallel_size=2",
                "model.sequence_parallel=True",
                "optimizer.lr=3e-4",
                "optimizer.adam_eps=1e-8",
                "dataset.kind=indexed",
                "dataset.data_paths=['0.3',a,'0.7',b]",
                "checkpoint.save=/tmp/x",
                "model.recompute_modules=[core_attn]",
                "mixed_precision.loss_scale=1024.5",
                "model.rope_scaling_factor=32.0",
                'dataset.split="98,1,1"',
                "logger.wandb_project=yes",
            ],
        )
    )
    text = cfg.to_yaml()
    back = ConfigContainer.from_yaml(text)
    assert back == cfg
    assert type(back.model) is GPTModelProvider
    assert back.to_yaml() == text


def test_from_yaml_partial_keeps_defaults_and_rejects_unknown_keys():
    cfg = ConfigContainer.from_yaml(
        "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2}\ntrain: {train_iters: 7}\n"
    )
    assert cfg.model.num_layers == 2 and cfg.train.train_iters == 7 and cfg.train.micro_batch_size == 1
    with pytest.raises(ConfigError, match=r"unknown key train.train_iter\b.*Did you mean train.train_iters"):
        ConfigContainer.from_yaml("model: {num_layers: 2}\ntrain: {train_iter: 7}\n")
    with pytest.raises(ConfigError, match=r"model is required"):
        ConfigContainer.from_yaml("train: {train_iters: 7}\n")


def test_config_file_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  train_iters: 50\n  micro_batch_size: 2\noptimizer:\n  lr: 1e-4\n")
    cfg, warnings = compose(tiny(), config_file=path, overrides=["train.train_iters=60"])
    assert (cfg.train.train_iters, cfg.train.micro_batch_size, cfg.optimizer.lr) == (60, 2, 1e-4)
    assert warnings == []


def test_run_config_yaml_as_config_file_reproduces_the_run(tmp_path):
    cfg, _ = compose(tiny(), overrides=["model.tensor_model_parallel_size=2", "train.train_iters=77"])
    path = tmp_path / "run_config.yaml"
    path.write_text(cfg.to_yaml())
    again, warnings = compose(tiny(), config_file=path)
    assert again == cfg and warnings == []


def test_interpolation_in_override(tmp_path):
    cfg = apply_overrides(
        tiny(), [f"checkpoint.save={tmp_path}", "logger.tensorboard_dir=${checkpoint.save}/tb"]
    )
    assert cfg.logger.tensorboard_dir == f"{tmp_path}/tb"
    with pytest.raises(
        ConfigError, match=r"logger.tensorboard_dir: Interpolation key 'nope.x' not found. Fix:"
    ):
        apply_overrides(tiny(), ["logger.tensorboard_dir=${nope.x}"])


def test_config_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  train_iters: lots\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: train.train_iters expects int, got 'lots'"):
        compose(tiny(), config_file=bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        compose(tiny(), config_file=bad)
    with pytest.raises(ConfigError, match="cannot read it"):
        compose(tiny(), config_file=tmp_path / "missing.yaml")


# ---- validation --------------------------------------------------------------------------------


def test_valid_config_gives_layout_and_no_warnings():
    cfg = apply_overrides(tiny(), ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"])
    assert build_plan(cfg, 4, cuda=True).warnings == ()
    assert run_layout(cfg, 4).describe() == "TP=2 PP=1 CP=1 EP=1 ETP=1 DP=2 EDP=4 world=4 SP"


@pytest.mark.parametrize(
    "overrides, world, expected",
    [
        (
            ["train.global_batch_size=6"],
            4,
            r"train.global_batch_size = 6: must be a multiple of train.micro_batch_size \(1\) x data-parallel size \(4\) = 4",
        ),
        (["train.micro_batch_size=3"], 2, r"train.micro_batch_size \(3\) x data-parallel size \(2\) = 6"),
        (["peft.scheme=qlora"], 1, r"peft.scheme = 'qlora': must be null or one of lora, dora"),
        (
            ["peft.scheme=lora"],
            1,
            r"checkpoint.pretrained_checkpoint = None: peft.scheme=lora trains adapters",
        ),
        (
            ["peft.scheme=lora", "peft.target_modules=[linear_qkv,q_proj]"],
            1,
            r"peft.target_modules = \['linear_qkv', 'q_proj'\]: .*\('q_proj' is not one\)",
        ),
        (["peft.scheme=lora", "peft.dim=0"], 1, r"peft.dim = 0: the adapter rank must be an integer >= 1"),
        (
            ["peft.scheme=lora", "distributed.strategy=fsdp2"],
            1,
            r"distributed.strategy = 'fsdp2': peft.scheme=lora runs with strategies megatron, ddp",
        ),
        (
            ["dataset.packed_sequence_size=16"],
            1,
            r"dataset.packed_sequence_size = 16: packing is for finetuning data \(dataset.kind=sft, chat or vlm\)",
        ),
        (["dataset.truncation=left"], 1, r"dataset.truncation = 'left': must be one of right, drop"),
        (
            ["dataset.pad_seq_to_mult=4"],
            1,
            r"dataset.pad_seq_to_mult = 4: pads the samples of packed rows, and dataset.packed_sequence_size is 0",
        ),
        (
            ["mixed_precision.precision=bf16"],
            1,
            r"mixed_precision.precision = 'bf16': must be one of bf16_mixed, fp16_mixed, fp32",
        ),
        (
            ["model.bf16=True", "mixed_precision.precision=fp32"],
            1,
            r"model.bf16 = True: mixed_precision.precision = 'fp32' is the one source",
        ),
        (
            ["scheduler.lr_warmup_iters=20"],
            1,
            r"scheduler.lr_warmup_iters = 20: warmup must be shorter than the decay: train.train_iters \(lr_decay_iters=null\) = 10",
        ),
        (  # equal is refused too: Megatron-Core's scheduler asserts warmup < decay
            ["scheduler.lr_warmup_iters=10"],
            1,
            r"scheduler.lr_warmup_iters = 10: warmup must be shorter than the decay",
        ),
        (["scheduler.lr_decay_iters=5", "scheduler.lr_warmup_iters=6"], 1, r"scheduler.lr_decay_iters = 5"),
        (
            ["scheduler.lr_decay_style=wsd"],
            1,
            r"scheduler.lr_decay_style = 'wsd': must be one of cosine, linear, constant",
        ),
        (["optimizer.min_lr=1.0"], 1, r"optimizer.min_lr = 1.0: must be between 0 and optimizer.lr"),
        (["optimizer.optimizer=lion"], 1, r"optimizer.optimizer = 'lion'"),
        (
            ["checkpoint.save_interval=100"],
            1,
            r"checkpoint.save_interval = 100: periodic saves need a directory.*Fix: set checkpoint.save=",
        ),
        (
            ["checkpoint.load=/does/not/exist"],
            1,
            r"checkpoint.load = '/does/not/exist': directory does not exist",
        ),
        (
            ["checkpoint.pretrained_checkpoint=/does/not/exist"],
            1,
            r"checkpoint.pretrained_checkpoint = '/does/not/exist': does not exist",
        ),
        (["checkpoint.ckpt_format=zarr"], 1, r"checkpoint.ckpt_format = 'zarr'"),
        (
            ["validation.eval_interval=5", "validation.eval_iters=0"],
            1,
            r"validation.eval_iters = 0: evaluation runs every 5 iterations but on no batches",
        ),
        (["dataset.data_paths=[a]"], 1, r"dataset.data_paths = \['a'\]: dataset.kind is mock"),
        (["dataset.kind=indexed"], 1, r"dataset.data_paths = \[\]: dataset.kind=indexed needs data files"),
        (["dataset.kind=indexed", "dataset.data_paths=[/nope/x]"], 1, r"/nope/x.bin, /nope/x.idx not found"),
        (["dataset.kind=jsonl", "dataset.data_paths=['0.5',a,b]"], 1, r"mixes weights and paths"),
        (['dataset.split="1,2,3,4"'], 1, r"dataset.split = '1,2,3,4': must be 1 to 3 comma-separated"),
        (
            ["tokenizer.vocab_size=1024"],
            1,
            r"tokenizer.vocab_size = 1024: the NullTokenizer emits ids up to vocab_size.*use at most 1023",
        ),
        (
            ["tokenizer.tokenizer_type=HuggingFaceTokenizer"],
            1,
            r"tokenizer.tokenizer_model = None: HuggingFaceTokenizer needs a tokenizer",
        ),
        (
            ["logger.wandb_entity=me"],
            1,
            r"logger.wandb_entity = 'me': W&B logging is on only when logger.wandb_project is set",
        ),
        (
            ["distributed.strategy=horovod"],
            1,
            r"strategy \(distributed.strategy\) = 'horovod': must be one of megatron, fsdp2, megatron_fsdp, ddp",
        ),
        (
            ["distributed.dp_size=4"],
            2,
            r"distributed.dp_size = 4: the data-parallel size is derived as world / \(tp \* pp \* cp\) = 2 / \(1 \* 1 \* 1\) = 2",
        ),
        (
            ["distributed.pp_schedule=interleaved_1f1b", "model.pipeline_model_parallel_size=2"],
            2,
            r"distributed.pp_schedule = 'interleaved_1f1b': interleaving needs virtual pipeline stages",
        ),
        (
            [
                "distributed.pp_schedule=1f1b",
                "model.pipeline_model_parallel_size=2",
                "model.virtual_pipeline_model_parallel_size=2",
            ],
            2,
            r"makes Megatron-Core run the interleaved schedule",
        ),
        (
            ["distributed.pp_schedule=pipedream"],
            1,
            r"distributed.pp_schedule = 'pipedream': must be one of 1f1b, interleaved_1f1b, gpipe, looped_bfs, "
            r"dfs, zero_bubble, v_schedule",
        ),
        (
            ["distributed.activation_checkpointing=True", "model.recompute_granularity=full"],
            1,
            r"set one of them",
        ),
        (
            ["optimizer.use_distributed_optimizer=False"],
            1,
            r"distributed.overlap_param_gather = True: overlapping the parameter all-gather needs the distributed optimizer",
        ),
        (
            ["distributed.strategy=megatron_fsdp", "optimizer.use_distributed_optimizer=False"],
            1,
            r"optimizer.use_distributed_optimizer = False: strategy megatron_fsdp",
        ),
        (["model.sequence_parallel=True"], 1, r"model.sequence_parallel\) = True: .*needs tp > 1"),
        (["model.tensor_model_parallel_size=2"], 3, r"world_size .* = 3: must be divisible by tp\*pp\*cp"),
        (["model.hidden_size=66"], 1, r"model.hidden_size = 66: must be divisible by num_attention_heads=4"),
    ],
)
def test_validation_rules(overrides, world, expected):
    cfg = apply_overrides(tiny(), overrides)
    with pytest.raises(ConfigError, match=expected) as err:
        build_plan(cfg, world, cuda=True)
    assert "Fix:" in str(err.value)


def test_existing_paths_pass(tmp_path):
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = str(tmp_path / "d")
    # a real index: the plan reads its document count (every split the run reads needs documents)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for _ in range(1000):
        builder.add_document(torch.arange(8, dtype=torch.int64), [8])
    builder.finalize(prefix + ".idx")
    (tmp_path / "ckpt").mkdir()
    cfg = apply_overrides(
        tiny(),
        [
            "dataset.kind=indexed",
            f"dataset.data_paths=['0.5',{prefix},'0.5',{prefix}]",
            f"checkpoint.load={tmp_path / 'ckpt'}",
            f"checkpoint.save={tmp_path / 'ckpt'}",
            "checkpoint.save_interval=5",
        ],
    )
    assert build_plan(cfg, 1, cuda=True).warnings == ()


def test_warnings_for_settings_the_strategy_ignores():
    cfg = apply_overrides(tiny(), ["distributed.strategy=fsdp2", "mixed_precision.loss_scale=128.0"])
    warnings = build_plan(cfg, 2, cuda=True).warnings  # fsdp2 needs CUDA
    assert any(
        "optimizer.use_distributed_optimizer=true has no effect with strategy fsdp2" in w for w in warnings
    )
    assert any(
        "distributed.overlap_grad_reduce" in w and "strategy fsdp2 does not use" in w for w in warnings
    )
    assert any("loss_scale=128.0 has no effect with precision bf16_mixed" in w for w in warnings)


def test_layout_warnings_are_returned():
    cfg = apply_overrides(tiny(num_layers=8), ["model.pipeline_model_parallel_size=4"])
    assert any("pp" in w.lower() and "interleav" in w.lower() for w in build_plan(cfg, 4).warnings)


def test_world_size_must_be_positive():
    with pytest.raises(ConfigError, match="world_size = 0"):
        build_plan(tiny(), 0)


def test_config_layer_imports_no_torch():
    code = (
        "import sys\n"
        "from bridge.config.container import ConfigContainer\n"
        "from bridge.config.compose import compose\n"
        "import bridge.config.validation, bridge.config.automodel\n"
        "bad = [m for m in ('torch', 'megatron.core') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["checkpoint.save_consolidated=True", "checkpoint.save=null", "checkpoint.save_interval=0"],
            r"checkpoint.save_consolidated = True: writes a Hugging Face copy inside each saved checkpoint, "
            r"but checkpoint.save is not set",
        ),
        (
            ["checkpoint.save_consolidated=True", "checkpoint.save=/tmp/bridge-consolidated-x"],
            r"the Hugging Face copy needs an architecture.*Fix: set checkpoint.hf_architecture \(one of .*LlamaForCausalLM",
        ),
        (
            [
                "checkpoint.save_consolidated=True",
                "checkpoint.save=/tmp/x",
                "checkpoint.hf_architecture=GPT2LMHead",
            ],
            r"architectures=\['GPT2LMHead'\]: no conversion is registered",
        ),
    ],
)
def test_save_consolidated_rules(overrides, message):
    from bridge.config.overrides import apply_overrides
    from recipes.llama import llama32_1b_pretrain_config

    cfg = apply_overrides(llama32_1b_pretrain_config(), overrides)
    with pytest.raises(ConfigError, match=message):
        build_plan(cfg, 8, cuda=True)


def test_hf_architecture_alone_names_the_export_architecture():
    from bridge.config.overrides import apply_overrides
    from recipes.llama import llama32_1b_pretrain_config

    cfg = apply_overrides(llama32_1b_pretrain_config(), ["checkpoint.hf_architecture=LlamaForCausalLM"])
    build_plan(cfg, 8, cuda=True)
    cfg = apply_overrides(llama32_1b_pretrain_config(), ["checkpoint.hf_architecture=Qwen3ForCausalLM"])
    with pytest.raises(
        ConfigError, match=r"checkpoint.hf_architecture = 'Qwen3ForCausalLM': cannot express.*qk_layernorm"
    ):
        build_plan(cfg, 8, cuda=True)


def test_save_consolidated_with_an_architecture_validates():
    from bridge.config.overrides import apply_overrides
    from recipes.llama import llama32_1b_pretrain_config

    cfg = apply_overrides(
        llama32_1b_pretrain_config(),
        [
            "checkpoint.save_consolidated=True",
            "checkpoint.save=/tmp/x",
            "checkpoint.hf_architecture=LlamaForCausalLM",
        ],
    )
    build_plan(cfg, 8, cuda=True)


@pytest.mark.parametrize(
    "overrides, world, expected",
    [
        (
            ["dataset.packed_sequence_size=32", "model.context_parallel_size=2", "dataset.pad_seq_to_mult=2"],
            2,
            r"dataset.pad_seq_to_mult = 2: with context parallelism every packed sample splits into 2\*cp = 4 "
            r"chunks.*Fix: set dataset.pad_seq_to_mult=4",
        ),
        (
            ["dataset.packed_sequence_size=30", "dataset.pad_seq_to_mult=4"],
            1,
            r"dataset.packed_sequence_size = 30: packed samples are padded to multiples of 4",
        ),
    ],
)
def test_packing_pad_multiple_rules(tmp_path, overrides, world, expected):
    data = tmp_path / "d.jsonl"
    data.write_text('{"input": "a", "output": "b"}\n')
    cfg = apply_overrides(tiny(), ["dataset.kind=sft", f"dataset.data_paths=[{data}]", *overrides])
    with pytest.raises(ConfigError, match=expected):
        build_plan(cfg, world, cuda=True)


def test_packed_rows_with_context_parallelism_validate_and_plan_the_padding(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"input": "a", "output": "b"}\n')
    cfg = apply_overrides(
        tiny(),
        ["dataset.kind=sft", f"dataset.data_paths=[{data}]", "dataset.packed_sequence_size=32",
         "model.context_parallel_size=2"],
    )  # fmt: skip
    assert build_plan(cfg, 2, cuda=True).data.pad_seq_to_mult == 4  # null means 2*cp
