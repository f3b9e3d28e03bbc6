"""How the planner splits the layers over pipeline stages: Megatron-Core's split fields, checked and counted
by the run's own rule code (bridge.parallel.stages). Pure Python.

A candidate layout's split is one of the splits the recipes use (`split_options`, in this order):

- the even split when pp (and pp*vpp) divides the layers;
- the embedding and the loss counted as one layer each (`account_for_embedding_in_pipeline_split`,
  `account_for_loss_in_pipeline_split`): Megatron-Bridge's published Llama 3.1 405B (126 layers + 2 on
  pp=8 x vpp=8) and Qwen3 235B (94 + 2 on pp=8 x vpp=4) layouts;
- uneven first / last stage counts (`num_layers_in_first_pipeline_stage` / `..._last_...`): the middle
  stages get the most layers, the ends the rest (DeepSeek-V3's 61 layers on 16 stages: 3, 4 x 14, 2);
- the embedding or the loss alone counted as a layer.

Of the splits Megatron-Core accepts for (layers, pp, vpp), the one with the lightest heaviest stage wins,
ties in that order. A recipe's own split fields (PlanRequest.split) are the only option when given: the
plan then accepts exactly what the dry run of that recipe accepts. Memory (bridge.parallel.memory) is
estimated for every stage of the real split; speed on its heaviest stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.errors import ConfigError
from bridge.parallel.stages import EMBEDDING, FIRST, LAST, LAYOUT, LOSS, stage_layers
from bridge.parallel.stages import StageSplit as SplitFields


@dataclass(frozen=True)
class StageSplit:
    """Decoder layers per pipeline rank: first, the fullest middle one, last; and the split fields that
    give them (SplitFields(): Megatron-Core's even split)."""

    pp: int
    first: int
    middle: int
    last: int
    fields: SplitFields = SplitFields()

    @property
    def even(self) -> bool:
        return not self.fields.given

    @property
    def heaviest(self) -> int:
        return max(self.first, self.middle, self.last)

    def describe(self) -> str:
        if self.even:
            return f"{self.middle} layers per stage"
        how = f" ({describe_fields(self.fields)})"
        if self.pp == 2:
            return f"uneven stages: first {self.first}, last {self.last} layers" + how
        return (
            f"uneven stages: first {self.first}, {self.pp - 2} x {self.middle}, last {self.last} layers" + how
        )


def describe_fields(fields: SplitFields) -> str:
    return ", ".join(f"{name}={value}" for name, value in field_values(fields).items())


def field_values(fields: SplitFields) -> dict[str, object]:
    """The split fields that are set, under their dotted config names (model.…)."""
    values = {
        FIRST: fields.first_stage_layers,
        LAST: fields.last_stage_layers,
        LAYOUT: fields.layout,
        EMBEDDING: fields.embedding_in_split or None,
        LOSS: fields.loss_in_split or None,
    }
    return {name: value for name, value in values.items() if value is not None}


def summary(counts: tuple[tuple[int, ...], ...], fields: SplitFields) -> StageSplit:
    """The StageSplit of stage_layers' counts ([rank][virtual stage])."""
    per_rank = [sum(row) for row in counts]
    pp = len(per_rank)
    middle = max(per_rank[1:-1]) if pp > 2 else per_rank[0] if not fields.given else 0
    return StageSplit(pp, per_rank[0], middle, per_rank[-1], fields)


def _first_last(num_layers: int, pp: int, chunks: int) -> SplitFields | None:
    """First / last stage counts (multiples of `chunks`) that leave the middle stages an even share of
    the most layers: the lightest heaviest stage of that kind; None when none exists."""
    best = None
    for middle_per_chunk in range(-(-num_layers // (pp * chunks)), 0, -1):
        middle = middle_per_chunk * chunks
        rest = num_layers - middle * (pp - 2)
        if pp == 2:
            rest = num_layers
        if rest < 2 * chunks:
            continue
        last = rest // 2 // chunks * chunks
        first = rest - last
        if first % chunks or last < chunks or (pp > 2 and max(first, last) > middle):
            continue
        best = SplitFields(first_stage_layers=first, last_stage_layers=last)
        break
    return best


def split_options(num_layers: int, pp: int, vpp: int | None) -> list[SplitFields]:
    """The splits to try for `num_layers` on pp x vpp stages, in order of preference (module docstring)."""
    chunks = vpp or 1
    options = [SplitFields(), SplitFields(embedding_in_split=True, loss_in_split=True)]
    if pp > 1:
        first_last = _first_last(num_layers, pp, chunks)
        if first_last is not None:
            options.append(first_last)
    options += [SplitFields(embedding_in_split=True), SplitFields(loss_in_split=True)]
    return options


def choose_split(
    num_layers: int, pp: int, vpp: int | None, given: SplitFields | None = None
) -> tuple[SplitFields, StageSplit]:
    """(fields, summary) of the split for this pipeline: `given` (a recipe's) when set, else the best of
    split_options. Raises the ConfigError of Megatron-Core's rules when no option is accepted."""
    if pp == 1 and (given is None or not given.given):
        counts = stage_layers(num_layers, 1, vpp, SplitFields())
        return SplitFields(), summary(counts, SplitFields())
    options = [given] if given is not None else split_options(num_layers, pp, vpp)
    best, error = None, None
    for fields in options:
        try:
            counts = stage_layers(num_layers, pp, vpp, fields)
        except ConfigError as err:
            error = error or err
            continue
        found = summary(counts, fields)
        if best is None or found.heaviest < best[1].heaviest:
            best = (fields, found)
        if not fields.given:  # the even split: nothing is lighter
            break
    if best is None:
        raise error
    return best


def layout_split(layout) -> StageSplit:
    """The StageSplit of a validated ParallelLayout (it holds the model and the split fields)."""
    return summary(layout.chunk_layers(), layout.split)
