"""`run_recipe.py --dry-run --gpu NAME`: the plan for that GPU system and its memory check, in-process.

The before / after of issue 43: DeepSeek-V3 on 1,024 H100 as Megatron-Bridge's recipe sets it (no
recomputation) is refused with the fix, and with this repository's full recompute fits; LoRA on GPT-OSS
20B on one H100 fits with the same estimate `bridge plan` gives (tests/unit/test_plan_agrees_with_dry_run.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from bridge.parallel.planner.systems import SYSTEMS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "training" / "run_recipe.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("run_recipe_gpu_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(script, capsys, *argv) -> tuple[int, str, str]:
    code = script.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_gpu_plans_for_the_named_system_and_checks_its_memory(script, capsys):
    code, out, err = _run(
        script,
        capsys,
        "--recipe",
        "gpt_oss_20b_peft_config",
        "--dry-run",
        "--world-size",
        "1",
        "--gpu",
        "h100",
    )
    assert code == 0, err
    assert "# device: cuda: NVIDIA H100 80GB HBM3, compute capability 9.0;" in out
    assert "precision: bf16_mixed -> bf16" in out
    found = re.search(r"# memory check \(h100\): ([\d.]+) GB per rank .* fits 72\.0 GB usable on a h100", out)
    estimate = re.search(r"# memory per rank \(estimate\): ([\d.]+) GB", out)
    assert found and estimate and found.group(1) == estimate.group(1)
    # every system bridge plan knows is a choice, with its memory
    for name, gpu in SYSTEMS.items():
        code, out, err = _run(
            script, capsys, "--recipe", "llama32_1b_pretrain_config", "--dry-run", "--gpu", name
        )
        assert code == 0, err
        assert f"usable on a {name} ({gpu.memory_gb:g} GB x 0.9)" in out and gpu.device_name in out


def test_a_recipe_that_does_not_fit_is_refused_with_the_fix_that_makes_it_fit(script, capsys):
    no_recompute = (
        "model.recompute_granularity=null",
        "model.recompute_method=null",
        "model.recompute_num_layers=null",
    )
    argv = ("--recipe", "deepseek_v3_pretrain_config", "--dry-run", "--world-size", "1024", "--gpu", "h100")
    code, out, err = _run(script, capsys, *argv, *no_recompute)
    assert code == 2 and out == ""
    assert re.search(
        r"memory per rank \(estimate\) = 90\.\d\d GB: does not fit 72\.0 GB usable on a h100", err
    )
    fix = re.search(r"Fix: (model\.recompute_granularity=full \S+ \S+),", err).group(1).split()
    code, out, err = _run(script, capsys, *argv, *fix)  # the fix, followed
    assert code == 0 and "fits 72.0 GB usable on a h100" in out, err
    # train.check_memory=false: planned anyway, and said
    code, out, err = _run(script, capsys, *argv, *no_recompute, "train.check_memory=false")
    assert code == 0 and "does NOT fit 72.0 GB usable on a h100" in out, err
    # the recipe as it is (full recompute) fits
    code, out, err = _run(script, capsys, *argv)
    assert code == 0 and "fits 72.0 GB usable on a h100" in out, err


def test_gpu_is_a_dry_run_flag_and_excludes_the_cpu(script, capsys):
    code, _, err = _run(
        script,
        capsys,
        "--recipe",
        "llama32_1b_pretrain_config",
        "--dry-run",
        "--gpu",
        "h100",
        "--device",
        "cpu",
    )
    assert (
        code == 2 and "--gpu h100 plans for a GPU and --device cpu for the CPU. Fix: drop one of them." in err
    )
    code, _, err = _run(script, capsys, "--recipe", "llama32_1b_pretrain_config", "--gpu", "h100")
    assert code == 2 and "--gpu is for dry runs" in err
    with pytest.raises(SystemExit):
        script.parse_args(["--recipe", "llama32_1b_pretrain_config", "--dry-run", "--gpu", "a100"])
