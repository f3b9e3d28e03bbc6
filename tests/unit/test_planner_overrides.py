"""`bridge plan --overrides` output applied to the recipe gives a config that validates to the planned layout."""

import contextlib
import io
import json

import pytest

from bridge.cli.plan import main as plan_main
from bridge.config import apply_overrides
from bridge.config.environment import Environment
from bridge.config.layout import run_layout
from bridge.config.run_plan import build_plan
from recipes import get_recipe

H100 = Environment(cuda=True, device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
CASES = [
    ("llama32_1b_pretrain_config", 1, []),  # the recipe's 8K sequence: cp falls back to 1
    ("llama32_1b_pretrain_config", 3, []),  # and the recipe's global batch 512 is rounded to 510 (dp=3)
    ("llama32_1b_pretrain_config", 8, []),
    ("llama31_8b_pretrain_config", 16, []),
    ("llama31_70b_pretrain_config", 64, []),
    ("llama31_70b_pretrain_config", 64, ["--interconnect", "ethernet"]),
    ("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", 16, []),
    ("mixtral_8x7b_pretrain_config", 64, ["--seq-length", "32768"]),
]


def _plan(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = plan_main(list(argv))
    return code, out.getvalue()


@pytest.mark.parametrize("recipe,gpus,extra", CASES, ids=[f"{r}-{g}-{'-'.join(e)}" for r, g, e in CASES])
def test_overrides_apply_and_validate(recipe, gpus, extra):
    args = ["--model", recipe, "--gpus", str(gpus), *extra]
    code, out = _plan(*args, "--overrides")
    assert code == 0, out
    _, js = _plan(*args, "--json")
    planned = json.loads(js)
    cfg = apply_overrides(get_recipe(recipe)(), out.split())
    plan = build_plan(cfg, gpus, env=H100)  # raises ConfigError on any cross-section rule
    # the dry run of the recipe with the plan's overrides estimates what the plan estimated (on a GPU)
    assert plan.memory.total == pytest.approx(planned["memory_gb"]["total"], abs=5e-4)  # 3 decimals
    layout = run_layout(cfg, gpus)
    got = {
        "tensor_model_parallel_size": layout.tp, "pipeline_model_parallel_size": layout.pp,
        "virtual_pipeline_model_parallel_size": layout.vpp, "context_parallel_size": layout.cp,
        "expert_model_parallel_size": layout.ep, "expert_tensor_parallel_size": layout.etp,
        "sequence_parallel": layout.sequence_parallel, "data_parallel_size": layout.dp,
        "expert_data_parallel_size": layout.edp, "min_gpus": layout.min_gpus,
    }  # fmt: skip
    assert got == {k: planned[k] for k in got}
    assert cfg.model.recompute_granularity == planned["recompute_granularity"]
