"""Pipeline schedules: the engine that runs each name, its stage layout, its microbatch rule, its bubble and
the activations it keeps in flight. Pure Python (no torch import): validation, the run plan, the memory
model, the planner and docs/parallelism.md ("Pipeline schedules") read this one table.

| name | engine | torch.distributed.pipelining class | stages per pipeline rank |
| --- | --- | --- | --- |
| 1f1b | Megatron-Core | - | one |
| interleaved_1f1b (interleaved1f1b) | Megatron-Core | - | vpp >= 2 (loop order) |
| gpipe | torch | ScheduleGPipe | one |
| looped_bfs | torch | ScheduleLoopedBFS | vpp >= 2 (loop order) |
| dfs | torch | ScheduleInterleaved1F1B (depth-first) | vpp >= 2 (loop order) |
| zero_bubble | torch | ScheduleInterleavedZeroBubble (ZB1P) | vpp >= 2 (loop order) |
| v_schedule | torch | ScheduleZBVZeroBubble | exactly 2 in V order: refused (V_SCHEDULE_REFUSAL) |

Bubble fractions (the share of a step a rank idles; p stages, m micro batches per step and data-parallel
rank, v virtual stages per rank; every stage equally fast; for the zero-bubble schedules the forward, the
input backward and the weight backward take equal time):

    1f1b, gpipe                       (p - 1) / (m + p - 1)
    interleaved_1f1b, dfs, looped_bfs (p - 1) / (v*m + p - 1)
    zero_bubble                       (p - 1) / (3*v*m + p - 1)   (1/3 of dfs's idle time: ZB-H1)
    v_schedule                        0 for m >= 2p - 1 (ZB-V), else as zero_bubble with v = 2

Activations in flight on the first stage, in micro batches through that rank's layers: 1f1b min(p, m);
interleaved_1f1b, dfs and zero_bubble min(p, m) * (1 + (p - 1) / (p*v)); gpipe and looped_bfs m (every
forward runs before the first backward).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    name: str
    engine: str  # "megatron" (megatron.core.pipeline_parallel) | "torch" (torch.distributed.pipelining)
    torch_class: str | None  # the class in torch.distributed.pipelining.schedules
    multi_stage: bool  # several (virtual) stages per pipeline rank: needs vpp >= 2
    description: str


SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule("1f1b", "megatron", None, False, "Megatron-Core's 1F1B (one forward, one backward)"),
        Schedule("interleaved_1f1b", "megatron", None, True, "Megatron-Core's interleaved 1F1B"),
        Schedule("gpipe", "torch", "ScheduleGPipe", False, "all forwards, then all backwards (fill-drain)"),
        Schedule(
            "looped_bfs", "torch", "ScheduleLoopedBFS", True,
            "breadth-first: every micro batch through a local stage before the next local stage",
        ),
        Schedule(
            "dfs", "torch", "ScheduleInterleaved1F1B", True,
            "depth-first interleaved 1F1B (torch's; the earlier micro batch first)",
        ),
        Schedule(
            "zero_bubble", "torch", "ScheduleInterleavedZeroBubble", True,
            "interleaved zero bubble (ZB1P): the weight backward fills the bubble",
        ),
        Schedule("v_schedule", "torch", "ScheduleZBVZeroBubble", True, "zero bubble V (two stages per rank, V order)"),
    )
}  # fmt: skip
NAMES = tuple(SCHEDULES)
MEGATRON = tuple(n for n, s in SCHEDULES.items() if s.engine == "megatron")
TORCH = tuple(n for n, s in SCHEDULES.items() if s.engine == "torch")

# Other spellings: AutoModel's interleaved1f1b, and torch's own names (get_schedule_class, case-insensitive).
ALIASES = {
    "interleaved1f1b": "interleaved_1f1b",
    "loopedbfs": "looped_bfs",
    "interleavedzerobubble": "zero_bubble",
    "zbvzerobubble": "v_schedule",
}

# Why v_schedule is refused (read from Megatron-Core 0.16.1 and 0.19.2, the releases bridge supports).
V_SCHEDULE_REFUSAL = (
    "ScheduleZBVZeroBubble needs the V stage layout (pipeline rank r holds stages r and 2*pp-1-r, the loss "
    "on rank 0), but Megatron-Core builds virtual stage v*pp + r on pipeline rank r (loop order): "
    "get_transformer_layer_offset and pipeline_model_parallel_layout count layers in that order, the "
    "output layer is built on the last pipeline rank, and the embedding group that ties the embedding "
    "to the output weight is the first and last pipeline rank, so a V model cannot be built from "
    "Megatron-Core's chunks"
)
V_SCHEDULE_FIX = "use zero_bubble (interleaved zero bubble, loop order) or dfs"


def normalize(name: str | None) -> str | None:
    """The canonical schedule name for `name` (None stays None); unknown names come back unchanged."""
    if name is None:
        return None
    text = str(name).strip().lower()
    return ALIASES.get(text, text)


def effective(name: str | None, vpp: int | None) -> str:
    """The schedule a run uses: the one given, else Megatron-Core's choice from vpp."""
    return normalize(name) or ("interleaved_1f1b" if vpp is not None and vpp > 1 else "1f1b")


def interleaved_microbatch_rule(pp: int, group: int | None, m: int) -> str | None:
    """The rule Megatron-Core's interleaved schedule (0.16.1 and 0.19.2) holds micro batch count `m` to on
    `pp` stages: groups of N = microbatch_group_size_per_vp_stage (None: pp), pp <= N <= m, and m % N is 0
    or >= pp; None when it holds. One rule for the plan's check and the planner's candidates."""
    n = pp if group is None else group
    if n > m:
        return f"groups of {n} micro batches, {m} per step are fewer"
    if 0 < m % n < pp:
        return f"groups of {n} micro batches leave a last group of {m % n} < pp"
    return None


def microbatch_rule(name: str, pp: int, m: int) -> str | None:
    """The rule micro batch count `m` breaks for schedule `name` on `pp` stages, or None."""
    if name in ("dfs", "zero_bubble"):
        rounds = max(1, m // pp)
        if m % rounds:
            return (
                f"torch's {SCHEDULES[name].torch_class} runs the micro batches in max(1, m // pp) = {rounds} "
                f"rounds and needs m = {m} to be a multiple of that"
            )
    return None


def bubble_fraction(name: str, pp: int, m: int, vpp: int | None = None) -> float:
    """The share of a step each rank idles (formulas in the module docstring)."""
    if pp <= 1:
        return 0.0
    v = vpp if vpp is not None and vpp > 1 else 1
    idle = pp - 1
    if name in ("1f1b", "gpipe"):
        work = m
    elif name in ("interleaved_1f1b", "dfs", "looped_bfs"):
        work = v * m
    elif name == "zero_bubble":
        work = 3 * v * m
    elif name == "v_schedule":
        if m >= 2 * pp - 1:
            return 0.0
        work = 3 * 2 * m  # fewer micro batches than ZB-V fills: counted as zero_bubble with v = 2
    else:
        raise ValueError(f"unknown pipeline schedule {name!r}")
    return idle / (work + idle)


def activations_in_flight(name: str, pp: int, m: int | None, vpp: int | None = None) -> float:
    """Micro batches of the first stage's layers held at the peak (m None: the 1F1B count, min = pp)."""
    if pp <= 1:
        return 1.0
    if name in ("gpipe", "looped_bfs"):
        return float(m if m is not None else pp)
    in_flight = float(pp if m is None else min(pp, m))
    if vpp is not None and vpp > 1 and name != "1f1b":
        in_flight *= 1 + (pp - 1) / (pp * vpp)
    return in_flight
