"""What the machine a run is planned for offers: CUDA, the device, the optional kernel packages.

The plan decides from this which GPU performance settings run (bridge.config.performance) and whether a
precision is possible. Found without importing torch when torch is not loaded yet (the dry run): the
driver's /proc entry, `nvidia-smi`, and the installed distributions' metadata. Tests build one by hand.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from bridge.config.scheduler_job import scheduler_job
from bridge.parallel.planner.systems import system

# Optional packages the performance settings need: import name -> distribution names to read a version from.
OPTIONAL_PACKAGES = {
    "transformer_engine": ("transformer-engine", "transformer_engine", "transformer-engine-cu12"),
    "deep_ep": ("deep_ep", "deep-ep"),
    "grouped_gemm": ("grouped_gemm", "grouped-gemm"),
    # apex's CUDA extension: Megatron-Core's own linear layers (the output layer too) accumulate weight
    # gradients with it under gradient_accumulation_fusion
    "fused_weight_gradient_mlp_cuda": ("apex",),
}


@dataclass(frozen=True)
class Environment:
    cuda: bool
    device_name: str | None = None  # e.g. "NVIDIA H100 80GB HBM3" (None without CUDA or when unknown)
    compute_capability: tuple[int, int] | None = None  # e.g. (9, 0)
    packages: dict[str, str] = field(default_factory=dict)  # installed optional packages -> version
    # the scheduler job this run is an attempt of (bridge.config.scheduler_job): a requeued attempt of the
    # same job may take over the checkpoint lock its killed attempt left on another node
    scheduler_job: str | None = None

    def has(self, package: str) -> bool:
        return package in self.packages

    def version(self, package: str) -> tuple[int, ...]:
        """The installed version's release numbers, e.g. (2, 8, 0) for "2.8.0+cu12" ((0,) when absent
        or unparsable)."""
        found = re.match(r"\d+(?:\.\d+)*", self.packages.get(package, ""))
        return tuple(int(n) for n in found.group(0).split(".")) if found else (0,)

    def describe(self) -> str:
        if not self.cuda:
            return "cpu"
        device = self.device_name or "CUDA device (name unknown)"
        cc = (
            f", compute capability {self.compute_capability[0]}.{self.compute_capability[1]}"
            if (self.compute_capability)
            else ""
        )
        te = self.packages.get("transformer_engine")
        return f"cuda: {device}{cc}; Transformer Engine {te if te else 'not installed'}"

    @classmethod
    def cpu(cls) -> Environment:
        return cls(cuda=False)

    @classmethod
    def for_system(cls, name: str) -> Environment:
        """A GPU of the named system (bridge.parallel.planner.systems: h100, h200, b200, gb200), with the
        optional packages installed here: what `run_recipe.py --dry-run --gpu NAME` plans for."""
        gpu = system(name)  # one ConfigError for an unknown name
        return cls(
            cuda=True,
            device_name=gpu.device_name,
            compute_capability=gpu.compute_capability,
            packages=_packages(),
        )

    @classmethod
    def detect(cls, cuda: bool | None = None) -> Environment:
        """This machine. `cuda` None: whether an NVIDIA driver is present."""
        if cuda is None:
            cuda = os.path.exists("/proc/driver/nvidia/version")
        job = scheduler_job(os.environ)
        if not cuda:
            return cls(cuda=False, scheduler_job=job)
        name, capability = _device()
        return cls(
            cuda=True,
            device_name=name,
            compute_capability=capability,
            packages=_packages(),
            scheduler_job=job,
        )


def _packages() -> dict[str, str]:
    found = {}
    for module, distributions in OPTIONAL_PACKAGES.items():
        if importlib.util.find_spec(module) is None:
            continue
        version = "unknown"
        for dist in distributions:
            try:
                version = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        found[module] = version
    return found


def _device() -> tuple[str | None, tuple[int, int] | None]:
    """Device 0's name and compute capability: from torch when it is already loaded, else nvidia-smi."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0))
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.splitlines()  # fmt: skip
        name, cap = (part.strip() for part in out[0].split(","))
        major, minor = cap.split(".")
        return name, (int(major), int(minor))
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return None, None
