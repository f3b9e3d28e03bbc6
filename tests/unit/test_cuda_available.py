"""A run's plan asks torch whether CUDA is there only where a GPU driver is loaded: on a CPU machine a
refused config is said before torch is imported (bridge.training.process_plan.cuda_available)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.functional.launch import REPO_ROOT

PROBE = textwrap.dedent(
    """
    import importlib, sys
    module = importlib.import_module("bridge.training.process_plan")
    module._GPU_DRIVER_PATHS = ({paths})
    got = module.cuda_available()
    print(got, "torch" in sys.modules)
    if "torch" in sys.modules:
        print(sys.modules["torch"].cuda.is_available())
    """
)


def _probe(paths: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(paths=paths)],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return out.split()


def test_no_driver_means_no_cuda_and_no_torch_import():
    assert _probe("'/nonexistent/driver',") == ["False", "False"]


def test_a_driver_means_torch_decides(tmp_path):
    driver = tmp_path / "version"
    driver.write_text("")
    got, imported, torch_says = _probe(f"{str(driver)!r},")
    assert imported == "True" and got == torch_says
