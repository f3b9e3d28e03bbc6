"""`bridge plan`'s engine: recommend a parallel layout for a model on a cluster. Pure Python.

One job per module: `request` (PlanRequest, Plan and the request's rules), `candidates` (the layouts tried,
in order of preference), `search` (the choice, the advice when nothing fits, `plan()`), `reasons` (why
the chosen layout), `report` (a Plan as a table, JSON or dotted overrides). The memory and parameter
models it checks the fit with are bridge.parallel.memory and bridge.parallel.param_count.
"""

from bridge.parallel.planner.report import format_table, plan_overrides, plan_to_json
from bridge.parallel.planner.request import (
    INTERCONNECTS,
    LARGE_DENSE,
    LONG_SEQUENCE,
    SIZE_FLAGS,
    STRATEGY_CHOICES,
    USABLE_FRACTION,
    Plan,
    PlanRequest,
    fsdp2_request_refusal,
    planned_global_batch,
    strategies_to_try,
)
from bridge.parallel.planner.search import plan

__all__ = [
    "INTERCONNECTS",
    "LARGE_DENSE",
    "LONG_SEQUENCE",
    "SIZE_FLAGS",
    "STRATEGY_CHOICES",
    "USABLE_FRACTION",
    "Plan",
    "PlanRequest",
    "format_table",
    "fsdp2_request_refusal",
    "plan",
    "plan_overrides",
    "plan_to_json",
    "planned_global_batch",
    "strategies_to_try",
]
