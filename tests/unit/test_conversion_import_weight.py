"""What the conversion path imports (issue 43: the conversion's imports were 2.12 s against torch's 1.02 s).

Importing `AutoBridge` and Megatron-Core as conversion does (`import_megatron`, what benchmarks/convert.py
times) loads Megatron-Core's own dependencies and bridge's model and conversion modules, nothing of
training, data, evaluation, serving, planning or recipes, and neither transformers (config.json is read as
JSON) nor torch.compile's machinery (deferred by import_megatron). A module added to this path that pulls
one of these in fails here (checked in a fresh interpreter: other tests import more)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# package -> why the conversion path has no use for it
NOT_ON_THE_PATH = {
    "torch._dynamo": "torch.compile's tracer (import_megatron defers torch.compile)",
    "torch._inductor": "torch.compile's compiler",
    "transformers": "config.json is read as JSON with the class defaults of each family",
    "huggingface_hub": "only for a Hub model id (hub_snapshot imports it)",
    "datasets": "training data",
    "peft": "PEFT interop is bridge's own (bridge.peft)",
    "lm_eval": "evaluation",
    "fastapi": "serving",
    "uvicorn": "serving",
    "omegaconf": "run configuration",
    "bridge.training": "training",
    "bridge.config": "run configuration and its validation",
    "bridge.inference": "generation and serving",
    "bridge.launch": "cluster launch",
    "bridge.cli": "the command line",
    "bridge.parallel.planner": "layout planning",
    "recipes": "recipes",
}

CHECK = textwrap.dedent(
    """
    import json, sys
    import torch, safetensors.torch
    from bridge.conversion.auto_bridge import AutoBridge
    from bridge.parallel.megatron_import import import_megatron

    import_megatron()
    print(json.dumps(sorted(sys.modules)))
    """
)


def test_the_conversion_path_imports_no_training_serving_or_compiler_module():
    out = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "megatron.core.models.gpt.gpt_model" in loaded and "bridge.conversion.weight_loader" in loaded
    found = {
        package: [m for m in loaded if m == package or m.startswith(package + ".")][:3]
        for package in NOT_ON_THE_PATH
    }
    found = {p: mods for p, mods in found.items() if mods}
    assert not found, {p: (mods, NOT_ON_THE_PATH[p]) for p, mods in found.items()}
