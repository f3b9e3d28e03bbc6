"""The dry run's memory check against a named GPU system (`run_recipe.py --dry-run --gpu h100`): the plan's
per-rank estimate against the usable memory `bridge plan` budgets for that GPU."""

from __future__ import annotations

from bridge.config.planning import memory_recompute
from bridge.config.run_plan import RunPlan
from bridge.errors import ConfigError
from bridge.parallel.planner.request import USABLE_FRACTION
from bridge.parallel.planner.systems import system


def system_memory_check(plan: RunPlan, gpu: str) -> str:
    """The dry run's memory check against a named GPU system: the line saying the plan's per-rank estimate
    fits its usable memory (bridge plan's budget: USABLE_FRACTION of the GPU's), or one ConfigError
    (train.check_memory=false: the line says it does not fit, and the run would try anyway)."""
    if plan.memory is None:
        return f"memory check ({gpu}): no estimate for this model shape"
    gpu_system = system(gpu)
    budget = gpu_system.memory_gb * USABLE_FRACTION
    m = plan.memory
    need = (
        f"{m.total:.2f} GB per rank (pipeline stage {m.stage}: weights {m.params:.2f}, grads {m.grads:.2f}, "
        f"optimizer {m.optimizer:.2f}, activations {m.activations:.2f}"
        + (f", gathered {m.gathered:.2f}" if m.gathered else "")
        + ")"
    )
    usable = f"{budget:.1f} GB usable on a {gpu} ({gpu_system.memory_gb:g} GB x {USABLE_FRACTION})"
    if m.total <= budget:
        return f"memory check ({gpu}): {need} fits {usable}"
    if not plan.config.train.check_memory:
        return f"memory check ({gpu}): {need} does NOT fit {usable}; train.check_memory=false: the run tries anyway"
    recompute = (
        ""
        if memory_recompute(plan.config) == "full"
        else "model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1, "
    )
    raise ConfigError(
        f"memory per rank (estimate) = {m.total:.2f} GB: does not fit {usable}; {need}. Fix: {recompute}"
        f"more ranks or model parallelism, a smaller train.micro_batch_size, a GPU with more memory "
        f"(--gpu), or `bridge plan --model <recipe> --gpus {plan.world_size} --gpu {gpu}` for a layout "
        "that fits (train.check_memory=false plans it anyway)"
    )
