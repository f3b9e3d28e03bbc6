"""Regenerate the TransformerConfig field snapshot of the installed Megatron-Core release.

    python scripts/dev/snapshot_transformer_fields.py            # write bridge/models/transformer_fields/mcore_X_Y.py
    python scripts/dev/snapshot_transformer_fields.py --check    # exit 1 if that file is out of date

Run it once per supported release (each in an environment with that release installed); each release
has its own generated module. The snapshot turns every `TransformerConfig` field into a
YAML/OmegaConf-friendly field (int, float, bool, str, optional/list of those): torch dtypes, enums and
the activation function are held by name and mapped back when the TransformerConfig is built. Fields
that cannot be written as data (callables, process hooks, objects) are listed with the reason they are
left out. tests/unit/test_transformer_fields.py runs `render()` and compares it with the committed file.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import sys
import types
import typing
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "bridge" / "models" / "transformer_fields"

# Fields that hold Python objects, not configuration values: the provider never carries them.
EXCLUDED = {
    "timers": "runtime hook set by the training loop",
    "finalize_model_grads_func": "runtime hook set by the training loop",
    "grad_scale_func": "runtime hook set by the training loop",
    "moe_grad_scale_func": "runtime hook set by the training loop",
    "mtp_grad_scale_func": "runtime hook set by the training loop",
    "experimental_attention_variant_loss_scale_func": "runtime hook set by the training loop",
    "no_sync_func": "runtime hook set by the training loop",
    "grad_sync_func": "runtime hook set by the training loop",
    "param_sync_func": "runtime hook set by the training loop",
    "_cpu_offloading_context": "private runtime state of Megatron-Core",
    "init_method": "callable; Megatron-Core derives it from init_method_std",
    "output_layer_init_method": "callable; Megatron-Core derives it from init_method_std and num_layers",
    "embedding_init_method": "callable; Megatron-Core derives it from embedding_init_method_std",
    "quant_recipe": "a Megatron-Core RecipeConfig object, not data",
}

# The activation is a callable in Megatron-Core; the provider holds its name (gpt_provider.ACTIVATIONS).
ACTIVATION_FIELDS = {"activation_func": "gelu"}


class _Skip(Exception):
    pass


def _py(value) -> str:
    """Python source for a default, quoted the way ruff format writes it."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        items = ", ".join(_py(v) for v in value)
        if isinstance(value, tuple):
            return f"({items},)" if len(value) == 1 else f"({items})"
        return f"[{items}]"
    return repr(value)


# MLATransformerConfig (multi-latent attention) fields TransformerConfig lacks: provider fields too,
# passed only when multi_latent_attention is set. Those the provider already holds as GPTModel
# arguments (rotary_base, rotary_percent) are passed from there; widened types say why.
MLA_HELD_BY_PROVIDER = ("rotary_base", "rotary_percent")
MLA_WIDENED = {
    "q_lora_rank": ("int | None", "None: no query compression (q_proj directly, DeepSeek-V2-Lite)"),
}

# Union fields kept whole (annotation Any: OmegaConf has no Union) because both forms are used.
BOTH_FORMS = {
    "moe_layer_freq": "int or per-layer list of 0/1 in Megatron-Core; both forms here (Any)",
}


def _is_torch_dtype(tp) -> bool:
    return getattr(tp, "__module__", None) == "torch" and getattr(tp, "__name__", None) == "dtype"


def _is_enum(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def _scalar(tp) -> tuple[str, tuple | None, str | None] | None:
    """(annotation, choices, by-name kind) of a scalar type, or None when it is not one."""
    if tp in (int, float, bool, str):
        return tp.__name__, None, None
    if typing.get_origin(tp) is typing.Literal:
        args = typing.get_args(tp)
        kinds = {type(a) for a in args}
        if kinds == {str}:
            return "str", args, None
        if kinds == {int}:
            return "int", args, None
        raise _Skip
    if _is_torch_dtype(tp):
        return "str", None, "dtype"
    if _is_enum(tp):
        return "str", tuple(m.name for m in tp), f"enum:{tp.__module__}.{tp.__qualname__}"
    return None


def _yaml_type(tp) -> tuple[str, tuple | None, str | None, str | None]:
    """(annotation, choices or None, by-name kind or None, note on narrowing or None) for one type."""
    scalar = _scalar(tp)
    if scalar:
        return (*scalar, None)
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        inner = _scalar(item)
        if inner is None or inner[2] is not None:
            raise _Skip
        return f"list[{inner[0]}]", None, None, None
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]

        def maybe_none(ann: str) -> str:
            return f"{ann} | None" if optional else ann

        if len(rest) == 1 and typing.get_origin(rest[0]) is tuple:
            inner = {_scalar(a) for a in typing.get_args(rest[0])}
            if len(inner) != 1 or None in inner:
                raise _Skip
            ann = f"list[{inner.pop()[0]}]"
            return maybe_none(ann), None, None, "a tuple in Megatron-Core; a list here"
        if len(rest) == 1:
            ann, choices, kind, note = _yaml_type(rest[0])
            return maybe_none(ann), choices, kind, note
        # Union[str, SomeEnum, List[...], ...]: OmegaConf has no Union; keep the plain scalar form.
        plain = [a for a in rest if a in (int, float, bool, str)]
        if not plain:
            raise _Skip
        note = "Union in Megatron-Core; only the scalar form here"
        return maybe_none(plain[0].__name__), None, None, note
    raise _Skip


def _default(f: dataclasses.Field, kind: str | None):
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if type(value) not in (list, dict) or value:
            raise SystemExit(f"{f.name}: default factory {f.default_factory} is not an empty list/dict")
        return value
    value = f.default
    if value is None:
        return None
    if kind == "dtype":
        from bridge.models.dtypes import BY_TORCH_NAME  # torch dtype -> the provider's name for it

        return BY_TORCH_NAME[str(value).removeprefix("torch.")].name
    if kind and kind.startswith("enum:"):
        return value.name
    return list(value) if isinstance(value, tuple) else value


def module_name(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"mcore_{major}_{minor}"


def installed_release() -> str:
    # The distribution's version: megatron.core.__version__ appends the git hash of the current directory.
    from importlib.metadata import version

    return version("megatron-core")


def render() -> str:
    from megatron.core.transformer import TransformerConfig

    mcore_version = installed_release()

    lines: list[str] = []
    choices: dict[str, tuple] = {}
    by_name: dict[str, str] = {}
    notes: dict[str, str] = {}
    excluded: dict[str, str] = {}
    for f in dataclasses.fields(TransformerConfig):
        if f.name in EXCLUDED:
            excluded[f.name] = EXCLUDED[f.name]
            continue
        if f.name in ACTIVATION_FIELDS:
            by_name[f.name] = "activation"
            lines.append(f"    {_py(f.name)}: ({_py('str')}, {_py(ACTIVATION_FIELDS[f.name])}),")
            continue
        try:
            if f.name in BOTH_FORMS:  # the Union's scalar and list forms both mean something here
                ann, ch, kind, note = "Any", None, None, BOTH_FORMS[f.name]
            else:
                ann, ch, kind, note = _yaml_type(f.type)
        except _Skip:
            raise SystemExit(
                f"{f.name}: type {f.type} has no YAML form; add it to EXCLUDED or ACTIVATION_FIELDS"
            ) from None
        if ch:
            choices[f.name] = ch
        if kind:
            by_name[f.name] = kind
        if note:
            notes[f.name] = note
        default = _default(f, kind)
        if default is None and not ann.endswith("| None"):
            ann += " | None"  # declared without Optional, but defaults to None (pipeline_dtype)
        lines.append(f"    {_py(f.name)}: ({_py(ann)}, {_py(default)}),")

    mla_lines, mla_notes = _mla_lines()
    notes.update(mla_notes)

    def fmt_dict(name: str, d: dict) -> str:
        body = "".join(f"    {_py(k)}: {_py(v)},\n" for k, v in d.items())
        return f"{name} = {{\n{body}}}\n"

    return (
        f'"""TransformerConfig\'s fields in megatron-core {mcore_version}, as data.\n\n'
        "GENERATED by scripts/dev/snapshot_transformer_fields.py with this release installed; do not edit\n"
        "by hand. tests/unit/test_transformer_fields.py fails when this file and the installed release\n"
        "disagree. Pure data: importing this module imports neither torch nor megatron.core.\n"
        '"""\n\n'
        f"RELEASE = {_py(mcore_version)}\n\n"
        "# TransformerConfig fields that hold objects, not values; the provider leaves them to Megatron-Core.\n"
        + fmt_dict("EXCLUDED_FIELDS", excluded)
        + "\n# Fields whose Megatron-Core type is a Literal or an enum: the allowed values (enums by member name).\n"
        + fmt_dict("FIELD_CHOICES", choices)
        + "\n# Fields held by name: 'dtype' (fp32/bf16/fp16), 'activation', or 'enum:<class path>'.\n"
        + fmt_dict("BY_NAME_FIELDS", by_name)
        + "\n# Fields whose type had to be narrowed to be YAML-friendly.\n"
        + fmt_dict("NARROWED_FIELDS", notes)
        + "\n# name: (annotation, default), in TransformerConfig's order.\n"
        + "FIELDS = {\n"
        + "\n".join(lines)
        + "\n}\n"
        + "\n# MLATransformerConfig's own fields (multi-latent attention), in its order: (annotation, default).\n"
        + "MLA_FIELDS = {\n"
        + "\n".join(mla_lines)
        + "\n}\n"
    )


def _mla_lines() -> tuple[list[str], dict[str, str]]:
    """The MLATransformerConfig fields TransformerConfig does not declare, as FIELDS lines."""
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    base = {f.name for f in dataclasses.fields(TransformerConfig)}
    lines: list[str] = []
    notes: dict[str, str] = {}
    for f in dataclasses.fields(MLATransformerConfig):
        if f.name in base or f.name in MLA_HELD_BY_PROVIDER:
            continue
        if f.name in MLA_WIDENED:
            ann, notes[f.name] = MLA_WIDENED[f.name]
            default = f.default
        else:
            ann, ch, kind, note = _yaml_type(f.type)
            if ch or kind or note:
                raise SystemExit(f"MLA field {f.name}: type {f.type} needs a by-name or narrowed form")
            default = _default(f, None)
        lines.append(f"    {_py(f.name)}: ({_py(ann)}, {_py(default)}),")
    return lines, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the snapshot is out of date")
    args = parser.parse_args(argv)
    text = render()
    target = PACKAGE / f"{module_name(installed_release())}.py"
    if args.check:
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{target} is out of date; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
