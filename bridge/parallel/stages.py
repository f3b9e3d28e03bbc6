"""Which transformer layers each pipeline stage holds: Megatron-Core's split fields, checked and counted.

Megatron-Core splits the decoder layers over the pipeline in one of three ways, chosen by
TransformerConfig fields that the provider holds under the same names (`StageSplit` here):

- evenly: num_layers / pp per rank (and / vpp per virtual stage);
- uneven first / last stage: `num_layers_in_first_pipeline_stage`, `num_layers_in_last_pipeline_stage`,
  the other ranks share the rest evenly; `account_for_embedding_in_pipeline_split` /
  `account_for_loss_in_pipeline_split` count the embedding / the loss as one layer of the even split;
- a layout string, `pipeline_model_parallel_layout` ("Et*3|t*4|...|tL"): one `|`-separated stage per
  virtual stage in loop order (virtual stage v of rank r is stage v*pp + r), `E` embedding, `t` a decoder
  layer, `m` a multi-token-prediction layer, `L` the loss; `x*n` and `(...)*n` repeat, commas are cosmetic.

`stage_layers` answers, before launch and in pure Python, what Megatron-Core's get_num_layers_to_build
answers at build time (tests/unit/test_stages.py compares both, and the string grammar with Megatron-Core's
PipelineParallelLayerLayout.parse_str_to_list, on both supported releases). Every rule Megatron-Core
asserts at build time is one ConfigError here, plus bridge's own: every stage holds a decoder layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bridge.errors import config_error

FIRST = "model.num_layers_in_first_pipeline_stage"
LAST = "model.num_layers_in_last_pipeline_stage"
LAYOUT = "model.pipeline_model_parallel_layout"
EMBEDDING = "model.account_for_embedding_in_pipeline_split"
LOSS = "model.account_for_loss_in_pipeline_split"
VPP = "model.virtual_pipeline_model_parallel_size"
PP = "model.pipeline_model_parallel_size"

LAYER_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
_GROUP_REPEAT = re.compile(r"\(([^)]+)\)\*(\d+)")  # (ab|c)*n
_CHAR_REPEAT = re.compile(r"(.)\*(\d+)")  # x*n


@dataclass(frozen=True)
class StageSplit:
    """Megatron-Core's pipeline split fields (None / False: the even split)."""

    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    layout: str | None = None
    embedding_in_split: bool = False
    loss_in_split: bool = False

    @property
    def given(self) -> bool:
        """Whether any field asks for something other than the even split."""
        return (
            self.first_stage_layers is not None
            or self.last_stage_layers is not None
            or self.layout is not None
            or self.embedding_in_split
            or self.loss_in_split
        )


def parse_layout(text: str, max_repeat: int | None = None) -> list[str]:
    """The stages of a layout string, each as its layer characters (Megatron-Core's grammar).
    `max_repeat`: the largest repeat count the model can use (checked before unrolling: Megatron-Core
    unrolls any count and runs out of memory on 'Et*999999999999|tL')."""
    if not isinstance(text, str):
        raise config_error(
            LAYOUT, text, "must be a string such as 'Et*3|t*4|tL'", "give the layout as a string"
        )
    unrolled = text.replace(",", "")
    if max_repeat is not None:
        _check_repeat_counts(text, unrolled, max_repeat)
    for pattern in (_GROUP_REPEAT, _CHAR_REPEAT):
        unrolled = pattern.sub(lambda m: m.group(1) * int(m.group(2)), unrolled)
    stages = unrolled.split("|")
    for stage in stages:
        unknown = sorted({ch for ch in stage if ch not in LAYER_CHARS})
        if unknown:
            raise config_error(
                LAYOUT,
                text,
                f"unknown layer character(s) {', '.join(map(repr, unknown))}; the grammar knows "
                + ", ".join(f"{c} ({name})" for c, name in LAYER_CHARS.items())
                + ", '|' between stages, x*n and (...)*n repeats",
                "write the layout with those characters only",
            )
    return stages


def _check_repeat_counts(text: str, unrolled: str, max_repeat: int) -> None:
    """Every repeat adds decoder / MTP layers or stages, and each stage holds a decoder layer, so a count
    above max(num_layers, mtp_num_layers) can never give a valid layout."""
    for pattern in (_GROUP_REPEAT, _CHAR_REPEAT):
        for m in pattern.finditer(unrolled):
            if int(m.group(2)) > max_repeat:
                raise config_error(
                    LAYOUT,
                    text,
                    f"repeat count {m.group(0)!r} exceeds {max_repeat}, the most layers or stages the model "
                    f"has (model.num_layers / model.mtp_num_layers)",
                    f"write {LAYOUT}='...' with repeat counts <= {max_repeat} (one t per decoder layer)",
                )


def stage_layers(
    num_layers: int, pp: int, vpp: int | None, split: StageSplit, mtp_num_layers: int | None = None
) -> tuple[tuple[int, ...], ...]:
    """Decoder layers of each model chunk, indexed [pipeline rank][virtual stage]; raises ConfigError for
    every split Megatron-Core would refuse, or that leaves a stage without a decoder layer."""
    chunks = vpp or 1
    if split.layout is not None:
        return _layout_counts(num_layers, pp, vpp, split, mtp_num_layers)
    if split.given and pp == 1:
        raise config_error(
            _first_given_field(split),
            _value_of(split, _first_given_field(split)),
            "places layers on pipeline stages, and the pipeline has one stage",
            f"set {PP} > 1, or remove the setting",
        )
    if split.first_stage_layers is not None or split.last_stage_layers is not None:
        per_rank = _first_last_counts(num_layers, pp, vpp, split)
    elif split.embedding_in_split or split.loss_in_split:
        per_rank = _accounted_counts(num_layers, pp, chunks, split)
    else:
        per_rank = _even_counts(num_layers, pp, vpp)
    counts = [[n // chunks] * chunks for n in per_rank]
    if split.embedding_in_split:
        counts[0][0] -= 1
    if split.loss_in_split:
        counts[-1][-1] -= 1
    field = _first_given_field(split)
    _check_non_empty(
        [counts[r][v] for v in range(chunks) for r in range(pp)],
        field or PP,
        _value_of(split, field) if field else pp,
    )
    return tuple(tuple(row) for row in counts)


def layer_ids(counts: tuple[tuple[int, ...], ...], pp_rank: int) -> tuple[int, ...]:
    """Global (0-based) decoder layer numbers rank `pp_rank` holds, over its virtual stages, in the loop
    order get_transformer_layer_offset counts: virtual stage v of rank r follows every chunk of stage v' < v
    and those of ranks r' < r at stage v."""
    pp, chunks = len(counts), len(counts[0])
    ids: list[int] = []
    offset = 0
    for v in range(chunks):
        for r in range(pp):
            if r == pp_rank:
                ids.extend(range(offset, offset + counts[r][v]))
            offset += counts[r][v]
    return tuple(ids)


def describe(counts: tuple[tuple[int, ...], ...]) -> str:
    """Layers per pipeline rank, e.g. '3+4+4+2' (virtual stages of a rank joined by '/': '2/1+...')."""
    return "+".join("/".join(str(n) for n in row) for row in counts)


# ---- the three splits --------------------------------------------------------------------------------


def _even_counts(num_layers: int, pp: int, vpp: int | None) -> list[int]:
    if num_layers % pp:
        raise config_error(
            f"pp ({PP})",
            pp,
            f"must divide model.num_layers ({num_layers}) so every stage gets whole layers",
            f"choose pp dividing num_layers, or give uneven stages ({FIRST} / {LAST}, or {LAYOUT})",
        )
    if vpp is not None and num_layers % (pp * vpp):
        raise config_error(
            f"vpp ({VPP})",
            vpp,
            f"with pp={pp}, pp*vpp = {pp * vpp} must divide model.num_layers ({num_layers})",
            "choose vpp so num_layers % (pp*vpp) == 0, or leave vpp unset",
        )
    return [num_layers // pp] * pp


def _first_last_counts(num_layers: int, pp: int, vpp: int | None, split: StageSplit) -> list[int]:
    chunks = vpp or 1
    if split.embedding_in_split or split.loss_in_split:
        field = EMBEDDING if split.embedding_in_split else LOSS
        raise config_error(
            field,
            True,
            f"Megatron-Core does not combine it with {FIRST} / {LAST} (both decide the first and last stages)",
            f"use either the first/last stage counts or {field}, or a {LAYOUT}",
        )
    rest, middle_ranks = num_layers, pp
    for field, count in ((FIRST, split.first_stage_layers), (LAST, split.last_stage_layers)):
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise config_error(
                field, count, "must be a positive integer (a stage without layers)", "give >= 1"
            )
        if count % chunks:
            raise config_error(
                field,
                count,
                f"must be divisible by {VPP} = {chunks}: each virtual stage of that rank gets the same count",
                f"use a multiple of {chunks}",
            )
        rest -= count
        middle_ranks -= 1
    if vpp is not None and middle_ranks == 0:
        # Megatron-Core's get_transformer_layer_offset divides by the middle stage count whenever virtual
        # stages are set: ZeroDivisionError on the last rank after launch (0.16.1 and 0.19.2).
        raise config_error(
            LAST,
            split.last_stage_layers,
            f"with {VPP} = {vpp} Megatron-Core needs at least one pipeline rank besides the first and the "
            f"last whose layers are not given by {FIRST} / {LAST}, and pp = {pp}",
            f"unset one of them (`~{LAST}`: the last stage then takes the rest), or `~{VPP}`, "
            f"or set {PP} >= 3",
        )
    given = (split.first_stage_layers or 0) + (split.last_stage_layers or 0)
    if rest < 0 or (middle_ranks == 0 and rest != 0):
        raise config_error(
            _first_given_field(split),
            _value_of(split, _first_given_field(split)),
            f"the first/last stage counts ({given} layers) and {middle_ranks} other stage(s) must add up to "
            f"model.num_layers ({num_layers})",
            f"give counts that leave {num_layers} - first - last layers for the other stages",
        )
    if middle_ranks and (rest == 0 or rest % (middle_ranks * chunks)):
        raise config_error(
            _first_given_field(split),
            _value_of(split, _first_given_field(split)),
            f"leaves {rest} layers for the {middle_ranks} middle stage(s), which must split them evenly"
            + (f" into {chunks} virtual stages each" if chunks > 1 else "")
            + " with at least one layer each",
            f"choose first/last counts so that num_layers - first - last is a positive multiple of "
            f"{middle_ranks * chunks}",
        )
    middle = rest // middle_ranks if middle_ranks else 0
    counts = [middle] * pp
    if split.first_stage_layers is not None:
        counts[0] = split.first_stage_layers
    if split.last_stage_layers is not None:
        counts[-1] = split.last_stage_layers
    return counts


def _accounted_counts(num_layers: int, pp: int, chunks: int, split: StageSplit) -> list[int]:
    slots = num_layers + int(split.embedding_in_split) + int(split.loss_in_split)
    if slots % (pp * chunks):
        field = EMBEDDING if split.embedding_in_split else LOSS
        raise config_error(
            field,
            True,
            f"num_layers ({num_layers}) plus the embedding and/or loss counted as layers = {slots} must be "
            f"divisible by pp*vpp = {pp * chunks}",
            "change the split (or pp / vpp) so the counted layers divide evenly",
        )
    return [slots // pp] * pp


def _layout_counts(
    num_layers: int, pp: int, vpp: int | None, split: StageSplit, mtp_num_layers: int | None
) -> tuple[tuple[int, ...], ...]:
    text = split.layout
    others = [f for f in (FIRST, LAST, EMBEDDING, LOSS) if _value_of(split, f) not in (None, False)]
    if others:
        raise config_error(
            LAYOUT,
            text,
            f"cannot be combined with {', '.join(others)} (Megatron-Core's rule)",
            "use one of them",
        )
    stages = parse_layout(text, max(num_layers, mtp_num_layers or 0))
    if len(stages) % pp:
        raise config_error(
            LAYOUT,
            text,
            f"has {len(stages)} stage(s), not a multiple of {PP} = {pp}",
            f"give pp x vpp stages separated by '|' ({pp} for one stage per rank)",
        )
    per_rank = len(stages) // pp
    if (vpp or 1) != per_rank:
        raise config_error(
            VPP,
            vpp,
            f"the layout's {len(stages)} stages on pp={pp} are {per_rank} virtual stage(s) per rank",
            f"set {VPP}={per_rank if per_rank > 1 else 'null'}",
        )
    flat = "".join(stages)
    rules = (
        (flat[:1] == "E" and flat.count("E") == 1, "must start with the embedding E, once"),
        (flat[-1:] == "L" and flat.count("L") == 1, "must end with the loss L, once"),
        (flat.count("t") == num_layers, f"holds {flat.count('t')} decoder layers t, model.num_layers is {num_layers}"),
        (flat.count("m") == (mtp_num_layers or 0), f"holds {flat.count('m')} MTP layers m, mtp_num_layers is "
         f"{mtp_num_layers}"),
        ("m" not in flat or "t" not in flat[flat.index("m"):], "places a decoder layer t after an MTP layer m"),
        (stages[-1].count("m") == flat.count("m"), "must place every MTP layer m in the last pipeline stage "
         "(with the loss L), as Megatron-Core builds them"),
    )  # fmt: skip
    for ok, rule in rules:
        if not ok:
            raise config_error(LAYOUT, text, rule, "fix the layout string")
    _check_non_empty([s.count("t") for s in stages], LAYOUT, text)
    return tuple(tuple(stages[v * pp + r].count("t") for v in range(per_rank)) for r in range(pp))


# ---- helpers ----------------------------------------------------------------------------------------


def _check_non_empty(loop_order_counts: list[int], field: str, value: object = None) -> None:
    for stage, count in enumerate(loop_order_counts):
        if count < 1:
            raise config_error(
                field,
                value,
                f"leaves pipeline stage {stage} (in loop order) without a decoder layer; every stage must hold one",
                "move a layer to that stage, or use fewer pipeline stages",
            )


def _value_of(split: StageSplit, field: str) -> object:
    return {
        FIRST: split.first_stage_layers,
        LAST: split.last_stage_layers,
        LAYOUT: split.layout,
        EMBEDDING: split.embedding_in_split,
        LOSS: split.loss_in_split,
    }.get(field)


def _first_given_field(split: StageSplit) -> str | None:
    for field in (LAYOUT, FIRST, LAST, EMBEDDING, LOSS):
        if _value_of(split, field) not in (None, False):
            return field
    return None
