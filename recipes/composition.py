"""A recipe is a base per kind + a model preset + one row of what differs (recipes/README in docs/recipes.md).

A family's recipe file is a table of `Row`s; `register(rows)` turns it into the registry's RecipeInfo
entries and the recipe functions (module attributes under the canonical name and every alias), so a new
variant is one row. A row names its kind (pretrain / sft / peft: the base in recipes.common), the preset
factory, the published layout and GPU count, and only the values that differ from the base.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.gpt_provider import GPTModelProvider
from bridge.parallel.sizes import FIELD_OF
from recipes.common import RecipeInfo, finetune_config, lora, pretrain_config
from recipes.gpu_settings import apply

KINDS = ("pretrain", "sft", "peft", "dpo", "distill")
# the layout keywords every recipe function accepts, with the short names rows use
# (no etp: Megatron-Bridge's recipes keep expert weights unsplit, the provider's default)
LAYOUT_KEYWORDS = {
    **{short: name for short, name in FIELD_OF.items() if short != "etp"},
    "sp": "sequence_parallel",
}
_LAYOUT_DEFAULTS = {"tp": 1, "pp": 1, "vpp": None, "cp": 1, "ep": 1, "sp": False}


@dataclass(frozen=True)
class Row:
    """One published recipe: what it takes from its base, preset and family, and what it changes."""

    name: str  # Megatron-Bridge's canonical name, e.g. llama3_8b_pretrain_2gpu_h100_bf16_config
    family: str  # the model family folder (bridge/models/<family>)
    # pretrain | sft | peft | dpo (full-parameter DPO on preference data) | distill (a student trained on a
    # teacher's logits); dpo and distill use the sft base
    kind: str
    title: str  # the model as people name it, e.g. "Llama 3 8B"
    preset: Callable[[], GPTModelProvider]
    gpus: int  # the published GPU count: the dry-run test validates the recipe there
    layout: Mapping[str, Any] = field(default_factory=dict)  # tp / pp / vpp / cp / ep / sp
    run: Mapping[str, Any] = field(default_factory=dict)  # keywords of the kind's base (recipes.common)
    settings: Mapping[str, Any] = field(
        default_factory=dict
    )  # GPU performance settings (recipes.gpu_settings)
    model: Mapping[str, Any] = field(default_factory=dict)  # other provider fields (recompute, stages, ...)
    config: Mapping[str, Any] = field(default_factory=dict)  # "section.field" -> value after the base
    peft: Mapping[str, Any] = field(default_factory=dict)  # adapter settings over lora()'s defaults
    aliases: tuple[str, ...] = ()  # Megatron-Bridge's short names (and bridge's earlier names)
    note: str = ""  # where a value differs from the published one, or cannot run here, and why

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")
        unknown = set(self.layout) - set(LAYOUT_KEYWORDS)
        if unknown:
            raise ValueError(f"{self.name}: layout keys {sorted(unknown)} (known: {sorted(LAYOUT_KEYWORDS)})")

    @property
    def entry(self) -> str:
        return "pretrain" if self.kind == "pretrain" else "finetune"

    def layout_values(self) -> dict[str, Any]:
        return {**_LAYOUT_DEFAULTS, **self.layout}

    def layout_text(self) -> str:
        """The layout in short form, e.g. "TP4 PP2 CP2 SP"."""
        lay = self.layout_values()
        parts = [f"TP{lay['tp']}", f"PP{lay['pp']}"]
        parts += [f"VPP{lay['vpp']}"] if lay["vpp"] else []
        parts += [f"CP{lay['cp']}"] if lay["cp"] > 1 else []
        parts += [f"EP{lay['ep']}"] if lay["ep"] > 1 else []
        parts += ["SP"] if lay["sp"] else []
        return " ".join(parts + self.stage_split_text())

    def stage_split_text(self) -> list[str]:
        """How uneven pipeline stages are asked for (bridge.parallel.stages): the first / last stage's
        layers, the layout string, or ["E+L in split"] when the embedding and the loss count as layers."""
        first, last = (self.model.get(f"num_layers_in_{end}_pipeline_stage") for end in ("first", "last"))
        if first is not None or last is not None:
            return [f"first {first} last {last}".replace(" None", " even")]
        if self.model.get("pipeline_model_parallel_layout"):
            return [f"`{self.model['pipeline_model_parallel_layout']}`"]
        counted = [
            c
            for c, f in (("E", "embedding"), ("L", "loss"))
            if self.model.get(f"account_for_{f}_in_pipeline_split")
        ]
        return ["+".join(counted) + " in split"] if counted else []

    def describe(self) -> str:
        """One line: model, kind, layout, long sequences, precision, GPUs, note (--list-recipes)."""
        parts = [self.layout_text()]
        what = {
            "pretrain": "pretraining",
            "sft": "full SFT",
            "peft": "LoRA",
            "dpo": "DPO",
            "distill": "distillation",
        }[self.kind]
        gpus = f"{self.gpus} GPU" + ("s" if self.gpus > 1 else "")
        seq = self.run.get("seq_length")
        parts += [f"{seq // 1024}K tokens"] if seq and seq > 8192 else []
        precision = self.run.get("precision", "bf16_mixed")
        parts += [precision] if precision != "bf16_mixed" else []
        text = f"{self.title} {what}, {' '.join(parts)} ({gpus})"
        return f"{text}; {self.note}" if self.note else text


def vlm_finetune_row(
    family: str, title: str, preset: Callable[[], GPTModelProvider], kind: str, gpus: int, layout: dict, *,
    key: str, run: Mapping[str, Any], settings: Mapping[str, Any],
) -> Row:  # fmt: skip
    """One of Megatron-Bridge's Gemma 3 VL / Ministral 3 finetuning recipes (`<key>_<kind>_<gpus>gpu_h100_bf16_config`,
    alias `<key>_<kind>_config`): the vision tower trains, evaluation on 10 batches, seed 1234."""
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
        family=family,
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run=run,
        settings=settings,
        model={"freeze_vision_model": False},
        config={"validation.eval_iters": 10, "rng.seed": 1234},
        aliases=(f"{key}_{kind}_config",),
    )


def variant(row: Row, name: str, *, aliases: tuple[str, ...] = (), **changes: Any) -> Row:
    """`row` with `changes`; mapping fields (layout, run, settings, model, config, peft) are merged. The
    new row starts without the parent's aliases and note (they name and explain the parent)."""
    merged: dict[str, Any] = {}
    for key, value in changes.items():
        current = getattr(row, key)
        merged[key] = {**current, **value} if isinstance(current, Mapping) else value
    fields = {f: getattr(row, f) for f in row.__dataclass_fields__}
    return Row(**{**fields, "note": "", **merged, "name": name, "aliases": aliases})


def build(row: Row, kwargs: Mapping[str, Any]) -> ConfigContainer:
    """The ConfigContainer of `row`; `kwargs` (the recipe function's keywords) override the row."""
    kwargs = dict(kwargs)
    layout = {LAYOUT_KEYWORDS[k]: v for k, v in row.layout_values().items()}
    for keyword in LAYOUT_KEYWORDS.values():
        if keyword in kwargs:
            layout[keyword] = kwargs.pop(keyword)
    model = apply(row.preset(), row.settings)
    for name, value in row.model.items():
        setattr(model, name, value)
    if row.kind == "pretrain":
        cfg = pretrain_config(model, **layout, **{**row.run, **kwargs})
    else:
        peft = None
        if row.kind == "peft":
            peft = lora(kwargs.pop("peft_scheme", "lora"), **row.peft)
        cfg = finetune_config(model, **layout, peft=peft, **{**row.run, **kwargs})
    for dotted, value in row.config.items():
        section, name = dotted.split(".")
        setattr(getattr(cfg, section), name, value)
    return cfg


def recipe_function(row: Row) -> Callable[..., ConfigContainer]:
    def recipe(**kwargs: Any) -> ConfigContainer:
        return build(row, kwargs)

    recipe.__name__ = recipe.__qualname__ = row.name
    recipe.__doc__ = (
        f"{row.describe()}.\n\nKeywords: the layout ({', '.join(LAYOUT_KEYWORDS.values())}) and those of "
        f"recipes.common.{'pretrain_config' if row.kind == 'pretrain' else 'finetune_config'}"
        + ("; peft_scheme (lora | dora)." if row.kind == "peft" else ".")
    )
    return recipe


def register(rows: tuple[Row, ...], module: str) -> tuple[tuple[RecipeInfo, ...], dict[str, Callable]]:
    """The registry entries of `rows` (declared by recipes.<module>) and its recipe functions by every
    name (canonical and aliases), for the module's globals."""
    infos: list[RecipeInfo] = []
    functions: dict[str, Callable] = {}
    for row in rows:
        function = recipe_function(row)
        infos.append(
            RecipeInfo(
                name=row.name,
                module=module.removeprefix("recipes."),
                description=row.describe(),
                default_world_size=row.gpus,
                entry=row.entry,
                family=row.family,
                kind=row.kind,
                aliases=row.aliases,
                factory=function,
                row=row,
            )
        )
        for name in (row.name, *row.aliases):
            functions[name] = function
    return tuple(infos), functions
