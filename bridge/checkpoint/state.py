"""What a checkpoint holds besides the weights: per-rank RNG state and optimizer-state fixes."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import numpy as np
import torch

from bridge.parallel import ranks

# Distributed-optimizer state stored per DP shard (reshardable across DP sizes only), the format
# Megatron-LM uses by default; the plain optimizer ignores these keys.
OPTIMIZER_METADATA = {"distrib_optim_sharding_type": "dp_reshardable", "chained_optim_avoid_prefix": True}
# Megatron-Core's distributed-optimizer formats bridge saves: `dp_reshardable` (the default: resumes under
# another DP size) and `fully_reshardable` (per parameter, like a plain optimizer: any TP / PP / DP).
OPTIMIZER_FORMATS = ("dp_reshardable", "fully_reshardable")


def optimizer_metadata(optimizer_format: str = "dp_reshardable") -> dict:
    """The `metadata` Megatron-Core's optimizer.sharded_state_dict takes for `optimizer_format` (a
    checkpoint loads with the format it was saved in)."""
    return {**OPTIMIZER_METADATA, "distrib_optim_sharding_type": optimizer_format}


def rng_state() -> dict:
    from megatron.core import tensor_parallel

    state = {
        "random": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    from megatron.core import tensor_parallel

    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def rng_sharded_object(data: dict | None):
    """Every rank keeps its own RNG state: one shard per global rank."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    rank, world = ranks.rank_world()
    return ShardedObject("rng_state", data, (world,), (rank,), replica_id=0)


def ensure_optimizer_state(optimizer) -> None:
    """Megatron-Core's DistributedOptimizer can describe its state for loading only once that state
    exists (without Apex/TE it reads Adam's 'step'); a fresh optimizer gets Megatron-Core's own dummy
    state first. The dummy step touches the parameters, which the load then overwrites."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        if isinstance(opt, DistributedOptimizer) and not opt.optimizer.state:
            opt._init_optimizer_states_with_dummy_values()


def restore_adam_steps(optimizer, loaded: Any) -> None:
    """Put Adam's step count back after loading a DistributedOptimizer without Apex/TE.

    Megatron-Core 0.16 restores 'step' from the checkpoint and then overwrites it while copying the
    per-parameter state (with the step of the freshly initialised state, 1), and the value it set was
    one tensor shared by every parameter. Both make bias correction wrong after a resume; this sets
    one fresh step tensor per parameter from the checkpoint's param_groups.
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    subs = getattr(optimizer, "chained_optimizers", [optimizer])
    if len(subs) == 1:
        saved = [loaded]
    elif isinstance(loaded, dict):
        saved = [v for _, v in sorted(loaded.items())]
    else:
        saved = list(loaded)
    for opt, sd in zip(subs, saved, strict=True):
        if not isinstance(opt, DistributedOptimizer) or not isinstance(sd, dict):
            continue
        groups = sd.get("optimizer", {}).get("param_groups", [])
        steps = {float(g["step"]) for g in groups if g.get("step") is not None}
        if len(steps) != 1:
            continue
        step = steps.pop()
        for state in opt.optimizer.state.values():
            if torch.is_tensor(state.get("step")):
                state["step"] = torch.tensor(step, dtype=state["step"].dtype, device=state["step"].device)


@contextlib.contextmanager
def adam_steps_kept(optimizer):
    """Megatron-Core's fully_reshardable load (0.16 and 0.19) copies each tensor of a parameter's
    optimizer state from the checkpoint into the state, but the checkpoint's per-parameter tensors leave
    out torch Adam's 'step' (load_state_dict has just set it from the param_groups): without Apex/TE the
    copy is a KeyError. While loading, a missing 'step' is the state's own (restore_adam_steps then gives
    each parameter its own step tensor)."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    patched = []
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        if not isinstance(opt, DistributedOptimizer):
            continue
        original = opt._set_main_param_and_optimizer_states

        def with_step(model_param, tensors, _opt=opt, _original=original):
            if "step" not in tensors:
                group, order = _opt.model_param_group_index_map[model_param]
                main_param = _opt.optimizer.param_groups[group]["params"][order]
                own = _opt.optimizer.state.get(main_param, {})
                if "step" in own:
                    tensors = {**tensors, "step": own["step"]}
            return _original(model_param, tensors)

        opt._set_main_param_and_optimizer_states = with_step  # this instance, for this load only
        patched.append(opt)
    try:
        yield
    finally:
        for opt in patched:
            del opt._set_main_param_and_optimizer_states


def use_current_lr(optimizer, loaded: Any) -> None:
    """Give the loaded optimizer state the current param groups' max_lr / min_lr (the config's, for
    scheduler.override_opt_param_scheduler). Megatron-Core 0.19 matches saved to current param groups by
    a key that includes max_lr and min_lr, so a changed optimizer.lr would not load at all; 0.16 keeps
    the saved values, which the scheduler then prefers. Bridge's groups share one (max_lr, min_lr)."""
    pairs = {(g.get("max_lr"), g.get("min_lr")) for g in optimizer.param_groups}
    if len(pairs) != 1:
        return
    max_lr, min_lr = pairs.pop()

    def visit(node):
        if isinstance(node, dict):
            groups = node.get("param_groups")
            if isinstance(groups, list):
                for g in groups:
                    if isinstance(g, dict) and "max_lr" in g:
                        g["max_lr"], g["min_lr"] = max_lr, min_lr
            for v in node.values():
                visit(v)
        elif isinstance(node, list | tuple):
            for v in node:
                visit(v)

    visit(loaded)
