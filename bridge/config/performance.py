"""GPU performance settings: which of the requested ones run on this machine, and why the others do not.

A recipe (or a user) asks for a setting by its Megatron-Core field (`model.bias_activation_fusion=true`,
`model.moe_grouped_gemm=true`, ...). Each setting needs pieces a machine may lack (CUDA, Transformer
Engine, a tensor-parallel layout with sequence parallelism, ...). The plan asks `resolve()` once: a
setting whose needs are met runs as asked; one whose needs are not met runs with its `off` value and the
plan reports it, with the reason, in the dry run and at startup. Nothing is silently dropped, and on a
CPU machine every setting is off, so the CPU path is the one the tests run.

Pure data and functions of the config, the layout and the Environment: no torch import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.models.performance_settings import SETTINGS, PerformanceSetting  # noqa: F401

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.environment import Environment
    from bridge.parallel.layout import ParallelLayout


@dataclass(frozen=True)
class Need:
    name: str
    missing: Callable[[ConfigContainer, ParallelLayout, Environment], str | None]  # None = met


def _cuda(cfg, layout, env) -> str | None:
    return None if env.cuda else "needs CUDA"


def _te(cfg, layout, env) -> str | None:
    if env.has("transformer_engine"):
        return None
    return "needs Transformer Engine (pip install --no-build-isolation 'transformer-engine[pytorch]')"


def _te_2_1(cfg, layout, env) -> str | None:
    if env.has("transformer_engine") and env.version("transformer_engine") >= (2, 1):
        return None
    return "needs Transformer Engine >= 2.1 (its fused permutation kernels)"


def _apex_wgrad(cfg, layout, env) -> str | None:
    if env.has("fused_weight_gradient_mlp_cuda"):
        return None
    return (
        "needs apex's fused_weight_gradient_mlp_cuda extension (Megatron-Core's output layer accumulates "
        "its weight gradient with it; Transformer Engine's layers do not need it)"
    )


def _experts(cfg, layout, env) -> str | None:
    return None if cfg.model.num_moe_experts else "the model has no experts"


def _tp_with_sp(cfg, layout, env) -> str | None:
    if layout.tp > 1 and cfg.model.sequence_parallel:
        return None
    return "needs tensor_model_parallel_size > 1 with sequence_parallel=true (it overlaps their all-gathers)"


def _interleaved(cfg, layout, env) -> str | None:
    if layout.pp > 1 and layout.interleaved:
        return None
    return "needs the interleaved pipeline (pipeline_model_parallel_size > 1 with virtual stages)"


def _megatron_grad_buffers(cfg, layout, env) -> str | None:
    if cfg.distributed.strategy in ("megatron", "megatron_fsdp"):
        return None
    return (
        f"needs Megatron-Core's gradient buffers (distributed.strategy megatron or megatron_fsdp, "
        f"not {cfg.distributed.strategy})"
    )


def _deep_ep(cfg, layout, env) -> str | None:
    backend = cfg.model.moe_flex_dispatcher_backend
    if backend in ("deepep", "hybridep") and not env.has("deep_ep"):  # HybridEP's kernels ship in DeepEP
        return f"needs DeepEP (the deep_ep package) for moe_flex_dispatcher_backend={backend}"
    if backend == "deepep" and (env.compute_capability or (0, 0)) < (9, 0):
        return "needs a Hopper or newer GPU (compute capability >= 9.0) for DeepEP"
    if layout.ep == 1:
        return "needs expert_model_parallel_size > 1 (it replaces the all-to-all between expert ranks)"
    return None


NEEDS = {n.name: n for n in (
    Need("cuda", _cuda),
    Need("transformer_engine", _te),
    Need("transformer_engine>=2.1", _te_2_1),
    Need("apex_fused_wgrad", _apex_wgrad),
    Need("experts", _experts),
    Need("tp_with_sp", _tp_with_sp),
    Need("interleaved_pipeline", _interleaved),
    Need("megatron_grad_buffers", _megatron_grad_buffers),
    Need("deep_ep", _deep_ep),
)}  # fmt: skip


BY_FIELD = {s.field: s for s in SETTINGS}


@dataclass(frozen=True)
class SettingState:
    field: str  # the model field
    requested: Any
    active: bool
    reason: str | None = None  # why it is not active

    def describe(self) -> str:
        value = f"model.{self.field}={self.requested}"
        return f"{value}: active" if self.active else f"{value}: inactive ({self.reason})"


def resolve(cfg: ConfigContainer, layout: ParallelLayout, env: Environment) -> tuple[SettingState, ...]:
    """The requested settings (a value other than `off`), each active or inactive with its reason."""
    states = []
    for setting in SETTINGS:
        requested = getattr(cfg.model, setting.field)
        if not setting.requested(requested):
            continue
        reason = next(
            (r for r in (NEEDS[n].missing(cfg, layout, env) for n in setting.needs) if r is not None), None
        )
        states.append(SettingState(setting.field, requested, reason is None, reason))
    return tuple(states)


def model_changes(states: tuple[SettingState, ...]) -> dict[str, Any]:
    """The provider fields the run sets: inactive settings back to `off`, active ones' companions."""
    changes: dict[str, Any] = {}
    for state in states:
        setting = BY_FIELD[state.field]
        if state.active:
            changes.update(setting.with_it)
        else:
            changes[state.field] = setting.off
    return changes


def summary(states: tuple[SettingState, ...]) -> list[str]:
    """One line for the active settings, one per reason for the inactive ones (the dry run, the log)."""
    active = [f"{s.field}={s.requested}" for s in states if s.active]
    lines = [f"performance: active: {', '.join(active)}"] if active else []
    by_reason: dict[str, list[str]] = {}
    for s in states:
        if not s.active:
            by_reason.setdefault(s.reason or "", []).append(f"{s.field}={s.requested}")
    lines += [f"performance: inactive ({reason}): {', '.join(names)}" for reason, names in by_reason.items()]
    return lines


def is_active(states: tuple[SettingState, ...], field: str) -> bool:
    return any(s.field == field and s.active for s in states)
