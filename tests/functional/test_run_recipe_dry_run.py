"""scripts/training/run_recipe.py --dry-run end to end: real processes for the exit codes and the
no-torch guarantee, plus the invalid combinations of docs/parallelism.md through main() in-process
(same code path, without paying ~1 s of interpreter start per case)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bridge.config.container import ConfigContainer

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "training" / "run_recipe.py"
DONE_WHEN = [
    "--recipe",
    "llama32_1b_pretrain_config",
    "--dry-run",
    "--world-size",
    "4",
    "model.tensor_model_parallel_size=2",
    "model.pipeline_model_parallel_size=2",
    "model.sequence_parallel=True",
]


def run_script(*args: str, cwd: Path = REPO_ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    # No PYTHONPATH: the script must find the repo itself, from any working directory.
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORLD_SIZE")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120
    )


def load_script():
    spec = importlib.util.spec_from_file_location("run_recipe_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_done_when_command_prints_config_and_layout_without_torch(tmp_path):
    proc = run_script("-X", "importtime", str(SCRIPT), *DONE_WHEN, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\n# layout: TP=2 PP=2 CP=1 EP=1 ETP=1 DP=1 EDP=2 world=4 SP\n" in proc.stdout
    cfg = ConfigContainer.from_yaml(proc.stdout)  # the plan follows as comments: the whole output loads
    assert (cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size) == (2, 2)
    assert cfg.model.sequence_parallel is True and cfg.dataset.seq_length == 8192
    # -X importtime lists every imported module on stderr: neither torch nor megatron.core is there.
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "bridge.config.container" in imported
    assert not {m for m in imported if m.split(".")[0] == "torch" or m.startswith("megatron.core")}


def test_invalid_input_exits_2_with_message_and_no_traceback():
    proc = run_script(
        str(SCRIPT),
        "--recipe",
        "llama32_1b_pretrain_config",
        "--dry-run",
        "--world-size",
        "4",
        "model.sequence_parallel=True",
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.startswith("error: ")
        and "model.sequence_parallel" in proc.stderr
        and "Fix:" in proc.stderr
    )
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_world_size_defaults_to_env_and_list_recipes():
    proc = run_script(
        str(SCRIPT),
        "--recipe",
        "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
        "--dry-run",
        env={"WORLD_SIZE": "16"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "\n# layout: TP=4 PP=2 CP=1 EP=4 ETP=1 DP=2 EDP=2 world=16 SP\n" in proc.stdout
    proc = run_script(str(SCRIPT), "--list-recipes")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    from recipes import RECIPES

    # grouped by family and kind: a "# family kind (n)" header per group, then one line per recipe
    recipe_lines = [line for line in lines if not line.startswith("# ")]
    assert len(recipe_lines) == len(RECIPES) == 201  # docs/recipes.md counts them per family and kind
    first = next(line for line in lines if line.startswith("llama32_1b_pretrain_1gpu_h100_bf16_config  "))
    assert "TP1 PP1" in first and "[llama32_1b_pretrain_config]" in first
    proc = run_script(str(SCRIPT), "--list-recipes", "gemma3")
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "# gemma3 pretrain (1)"


@pytest.mark.parametrize(
    "args, field, fix",
    [
        # SP without TP (docs/parallelism.md, "Sequence parallelism")
        (
            ["--world-size", "2", "model.sequence_parallel=True"],
            "model.sequence_parallel",
            "raise tp above 1",
        ),
        # CP needs seq_length % (2 cp) == 0
        (
            ["--world-size", "4", "model.context_parallel_size=2", "model.seq_length=8190"],
            "model.seq_length",
            "multiple of 4",
        ),
        # EP on a dense model
        (
            ["--world-size", "4", "model.expert_model_parallel_size=2"],
            "model.expert_model_parallel_size",
            "ep=1",
        ),
        # megatron_fsdp has no PP / EP / SP
        (
            [
                "--world-size",
                "4",
                "distributed.strategy=megatron_fsdp",
                "model.pipeline_model_parallel_size=2",
            ],
            "model.pipeline_model_parallel_size",
            "pp=1",
        ),
        (
            [
                "--world-size",
                "4",
                "distributed.strategy=megatron_fsdp",
                "model.tensor_model_parallel_size=2",
                "model.sequence_parallel=True",
            ],
            "model.sequence_parallel",
            "sequence_parallel=False",
        ),
        # ddp is data parallel only
        (
            ["--world-size", "4", "distributed.strategy=ddp", "model.tensor_model_parallel_size=2"],
            "model.tensor_model_parallel_size",
            "tp=1",
        ),
        # dp_replicate_size is FSDP2 only; and it must be < dp
        (
            ["--world-size", "4", "distributed.strategy=ddp", "distributed.dp_replicate_size=2"],
            "distributed.dp_replicate_size",
            "distributed.strategy=fsdp2",
        ),
        (
            ["--world-size", "4", "distributed.strategy=fsdp2", "distributed.dp_replicate_size=4"],
            "distributed.dp_replicate_size",
            "smaller",
        ),
        # packed_sequence_size % cp
        (
            ["--world-size", "4", "model.context_parallel_size=4", "dataset.packed_sequence_size=8190"],
            "dataset.packed_sequence_size",
            "Fix:",
        ),
        # packing is for finetuning data: pretraining refuses it before launch (the loader once did, at run time)
        (
            ["--world-size", "4", "dataset.packed_sequence_size=8192"],
            "dataset.packed_sequence_size",
            "dataset.packed_sequence_size=0",
        ),
        # min_gpus = PP * max(TP*CP, EP*ETP), and world must divide into dp
        (["--world-size", "6", "model.tensor_model_parallel_size=4"], "world_size", "Fix:"),
        # global batch % (micro * dp)
        (["--world-size", "3", "train.global_batch_size=8"], "train.global_batch_size", "multiple of 3"),
        # head / group divisibility by TP
        (
            ["--world-size", "16", "model.tensor_model_parallel_size=16"],
            "model.tensor_model_parallel_size",
            "Fix:",
        ),
        # strict overrides
        (["model.num_layer=4"], "model.num_layers", "Did you mean"),
        (["model.num_layers=two"], "model.num_layers", "Fix: give int"),
    ],
)
def test_seed_invalid_combinations_exit_2(args, field, fix, capsys):
    script = load_script()
    code = script.main(["--recipe", "llama32_1b_pretrain_config", "--dry-run", *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("error: ") and field in err and fix in err, err


def test_moe_seed_on_fsdp2_plans_ep_with_checkpoints(capsys, tmp_path):
    # NeMo AutoModel's MoE example (fsdp2, ep_size 8), as a config file, on the Qwen3-30B-A3B recipe.
    path = tmp_path / "moe.yaml"
    path.write_text(
        textwrap.dedent(
            """
        distributed:
          strategy: fsdp2
          tp_size: 1
          cp_size: 1
          pp_size: 1
          ep_size: 8
          sequence_parallel: false
          activation_checkpointing: true
        """
        )
    )
    script = load_script()
    code = script.main(
        [
            "--recipe",
            "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
            "--dry-run",
            "--world-size",
            "8",
            "--config-file",
            str(path),
        ]
    )
    out, err = capsys.readouterr()
    # fsdp2 x EP=8 is a valid layout, with the recipe's checkpoint.save (torch DCP shards under fsdp2)
    assert code == 0, err
    assert "\n# layout: TP=1 PP=1 CP=1 EP=8 ETP=1 DP=8 EDP=1 world=8 strategy=fsdp2\n" in out
    code = script.main(
        [
            "--recipe",
            "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
            "--dry-run",
            "--world-size",
            "8",
            "--config-file",
            str(path),
            "distributed.strategy=megatron",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "\n# layout: TP=1 PP=1 CP=1 EP=8 ETP=1 DP=8 EDP=1 world=8\n" in out
    assert "activation_checkpointing: true" in out


def test_automodel_config_file_with_dp_size_and_warnings(capsys, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("distributed:\n  tp_size: 2\n  dp_size: 2\n  pipeline: {pp_microbatch_size: 1}\n")
    script = load_script()
    assert (
        script.main(
            [
                "--recipe",
                "llama32_1b_pretrain_config",
                "--dry-run",
                "--world-size",
                "4",
                "--config-file",
                str(path),
            ]
        )
        == 0
    )
    assert "DP=2 EDP=4 world=4\n" in capsys.readouterr().out
    assert (
        script.main(
            [
                "--recipe",
                "llama32_1b_pretrain_config",
                "--dry-run",
                "--world-size",
                "8",
                "--config-file",
                str(path),
            ]
        )
        == 2
    )
    assert "distributed.dp_size = 2" in capsys.readouterr().err


def test_layout_warnings_are_printed(capsys):
    script = load_script()
    code = script.main(
        [
            "--recipe",
            "llama32_1b_pretrain_config",
            "--dry-run",
            "--world-size",
            "4",
            "model.pipeline_model_parallel_size=4",
        ]
    )
    out, _ = capsys.readouterr()
    assert code == 0 and any(line.startswith("# warning: ") for line in out.splitlines())


def test_missing_recipe_is_a_usage_error(capsys):
    script = load_script()
    with pytest.raises(SystemExit) as exc:
        script.main(["--dry-run"])
    assert exc.value.code == 2 and "--recipe is required" in capsys.readouterr().err
    assert script.main(["--recipe", "llama_1b", "--dry-run"]) == 2
    assert "no such recipe" in capsys.readouterr().err
