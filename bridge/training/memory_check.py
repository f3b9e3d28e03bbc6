"""Before the model is built: compare the plan's per-rank memory estimate with what this machine has.

A model that cannot fit would otherwise grow for minutes (the 1B recipe on CPU reaches 20 GB) before
the operating system kills it. The estimate is the planner's (bridge.parallel.memory), for the
precision that actually runs.
"""

from __future__ import annotations

import logging
import os

from bridge.config.run_plan import RunPlan
from bridge.errors import ConfigError

logger = logging.getLogger("bridge.training")

GB = 1e9


def available_gb(cuda: bool) -> tuple[float, str]:
    """(GB one rank may use, what was measured): the GPU's total memory, or this host's available
    memory shared by the ranks launched on it."""
    if cuda:
        import torch

        _, total = torch.cuda.mem_get_info()
        return total / GB, f"{torch.cuda.get_device_name()} memory"
    import psutil

    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    free = psutil.virtual_memory().available / GB
    return free / local_ranks, f"available host memory / {local_ranks} local rank(s)"


def check_memory_fits(plan: RunPlan, skip: bool = False, log: bool = True) -> None:
    """Raise ConfigError when the estimate exceeds the memory one rank has (train.check_memory=false skips)."""
    if plan.memory is None:
        return
    have, what = available_gb(plan.cuda)
    need = plan.memory.total
    if log:
        logger.info("memory per rank: estimate %.2f GB, %s %.2f GB", need, what, have)
    if need <= have:
        return
    message = (
        f"the model needs about {need:.1f} GB per rank (weights {plan.memory.params:.1f}, grads "
        f"{plan.memory.grads:.1f}, optimizer {plan.memory.optimizer:.1f}, activations "
        f"{plan.memory.activations:.1f}; {plan.layout.describe()}) but a rank has {have:.1f} GB ({what})"
    )
    if skip:
        if log:
            logger.warning("%s; train.check_memory=false: building it anyway", message)
        return
    raise ConfigError(
        f"{message}. Fix: shrink the model or the micro batch, add ranks (tensor/pipeline parallelism "
        "divides the weights), or set train.check_memory=false to try anyway"
    )
