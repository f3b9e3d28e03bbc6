"""The plan of this process: the config validated once for this launch (torchrun's world size, this
machine's CUDA). Light on purpose: where no GPU driver is loaded, a refused config is said before the
seconds of torch's import, on every rank of the launch."""

from __future__ import annotations

import os

from bridge.config.container import ConfigContainer
from bridge.config.run_plan import RunPlan, build_plan
from bridge.parallel import ranks

# where a loaded GPU driver shows: NVIDIA's on Linux, WSL 2's GPU device, AMD's (ROCm builds of torch)
_GPU_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/dxg", "/dev/kfd")


def plan_for_this_process(config: ConfigContainer) -> RunPlan:
    """Validate `config` for this launch (torchrun's world size, this machine's CUDA)."""
    return build_plan(config, ranks.world_size(), cuda=cuda_available())


def cuda_available() -> bool:
    """torch.cuda.is_available(), without importing torch where no GPU driver is loaded: CUDA needs one
    (NVIDIA's; WSL's GPU device; AMD's for ROCm builds), so a config refused on a CPU machine is said
    before the seconds of torch's import, on every rank of the launch. The run then checks the plan
    against torch itself (_check_plan_matches_process)."""
    if not any(os.path.exists(path) for path in _GPU_DRIVER_PATHS):
        return False
    import torch  # only where a GPU driver is loaded: torch decides

    return torch.cuda.is_available()
