"""What a user sees (issue 29, items 2 and 6): the run's detail lines only with -v / logger.verbose, the
recipe's own values not warned about in the run's log, a PEFT adapter's absolute base path, generation's
text without the EOS it stopped at, `bridge plan` sized by a small config.json's context window."""

from __future__ import annotations

import importlib.util
import json
import logging
import warnings
from pathlib import Path

import pytest

from bridge.config.compose import compose
from bridge.config.run_plan import build_plan
from bridge.conversion.hf_adapter import adapter_config
from bridge.parallel import quiet_warnings, runtime
from recipes import get_recipe

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_detail_loggers_show_only_when_verbose():
    backend = logging.getLogger("bridge.parallel.cpu_backend")
    before = backend.level
    try:
        runtime.set_verbosity(False)
        assert not backend.isEnabledFor(logging.INFO) and backend.isEnabledFor(logging.WARNING)
        runtime.set_verbosity(True)
        assert backend.isEnabledFor(logging.INFO)
    finally:
        backend.setLevel(before)


def test_run_recipe_v_sets_logger_verbose():
    spec = importlib.util.spec_from_file_location(
        "run_recipe_v", REPO_ROOT / "scripts/training/run_recipe.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.parse_args(["--recipe", "llama32_1b_pretrain_config", "-v", "train.train_iters=3"])
    assert args.verbose and args.overrides == ["train.train_iters=3"]
    assert not module.parse_args(["--recipe", "x"]).verbose


def test_the_recipes_cpu_and_ddp_values_are_detail_warnings():
    cfg, _ = compose(
        get_recipe("llama32_1b_pretrain_config")(),
        overrides=["distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=False"],
    )
    plan = build_plan(cfg, 2, cuda=False)
    details = plan.detail_warnings
    assert any("bf16_mixed needs CUDA; training in fp32 on CPU" in w for w in details)
    assert any(w.startswith("dataset.num_workers=") for w in details)
    assert any("distributed.overlap_grad_reduce" in w and "fsdp2 does not use" in w for w in details)
    assert set(details) <= set(plan.warnings)  # the dry run still lists every one
    # what the user asked for and cannot get stays a warning of the run's log
    cfg, _ = compose(
        get_recipe("llama32_1b_pretrain_config")(),
        overrides=["distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=True"],
    )
    plan = build_plan(cfg, 2, cuda=False)
    shown = [w for w in plan.warnings if w not in plan.detail_warnings]
    assert any("use_distributed_optimizer=true has no effect with strategy fsdp2" in w for w in shown)


@pytest.mark.parametrize(
    "message, category, module, cpu_only",
    [
        ("Please use DTensor instead and we are deprecating ShardedTensor.", FutureWarning,
         "bridge.parallel.cpu_device_mode", True),
        ("`load_state_dict` is deprecated and will be removed in future versions. Please use `load` instead.",
         FutureWarning, "megatron.core.dist_checkpointing.strategies.torch", False),
        ("When using async grad allreduce it is recommended to set the environment variable "
         "CUDA_DEVICE_MAX_CONNECTIONS to 1 for maximum speedup", UserWarning,
         "megatron.core.tensor_parallel.layers", True),
    ],
)  # fmt: skip
def test_megatron_cores_own_calls_are_quiet(message, category, module, cpu_only):
    def shown(cpu: bool) -> bool:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_warnings.add_filters(cpu)
            warnings.warn_explicit(message, category, filename="x.py", lineno=1, module=module)
        return bool(caught)

    assert not shown(cpu=True)
    assert shown(cpu=False) == cpu_only
    with warnings.catch_warnings(record=True) as caught:  # the same text from the user's code still shows
        warnings.simplefilter("always")
        quiet_warnings.add_filters(True)
        warnings.warn_explicit(message, category, filename="x.py", lineno=1, module="my_script")
    assert caught


def test_adapter_base_path_is_absolute(tmp_path, monkeypatch):
    (tmp_path / "tiny_hf").mkdir()
    monkeypatch.chdir(tmp_path)
    config = adapter_config({"r": 8}, ["q_proj"], "tiny_hf")
    assert config["base_model_name_or_path"] == str(tmp_path / "tiny_hf")
    assert adapter_config({}, [], "org/some-model")["base_model_name_or_path"] == "org/some-model"
    assert adapter_config({}, [], None)["base_model_name_or_path"] is None


def test_generated_text_leaves_out_the_eos_it_stopped_at():
    spec = importlib.util.spec_from_file_location(
        "generate_cli_eos", REPO_ROOT / "scripts/inference/generate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.text_ids([5, 6, 2], [2]) == [5, 6]
    assert module.text_ids([5, 6, 7], [2]) == [5, 6, 7]  # stopped by max_new_tokens
    assert module.text_ids([5, 2, 7], [2]) == [5, 2, 7]
    assert module.text_ids([5, 6, 2], None) == [5, 6, 2]  # --ignore-eos


def test_plan_of_a_small_config_json_uses_its_context_window(tmp_path, capsys):
    from bridge.cli.plan import main

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 512, "vocab_size": 64,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["--model", str(path), "--gpus", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_length"] == 512
    assert main(["--model", str(path), "--gpus", "2", "--json", "--seq-length", "256"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_length"] == 256
    path.write_text(json.dumps({**config, "max_position_embeddings": 131072}))
    assert main(["--model", str(path), "--gpus", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_length"] == 4096


def test_the_interleaved_schedule_dispatches_param_gathers_alone():
    """With the interleaved schedule dispatching each chunk's all-gathers (config.param_sync_func), the
    forward hooks do not (Megatron-LM's align_param_gather): no "already dispatched" warning per step."""
    from bridge.config.sections import DistributedConfig
    from bridge.training.strategies import ddp_config_for

    assert ddp_config_for(DistributedConfig(), "megatron", True, interleaved=True).align_param_gather
    assert not ddp_config_for(DistributedConfig(), "megatron", True).align_param_gather
    assert not ddp_config_for(DistributedConfig(), "megatron", False, interleaved=True).align_param_gather
