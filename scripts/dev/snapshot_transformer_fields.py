"""Regenerate bridge/models/transformer_fields.py from the installed Megatron-Core.

    python scripts/dev/snapshot_transformer_fields.py            # rewrite the snapshot
    python scripts/dev/snapshot_transformer_fields.py --check    # exit 1 if it is out of date

The snapshot turns every `TransformerConfig` field into a YAML/OmegaConf-friendly dataclass field
(int, float, bool, str, optional/list of those) so the provider stays pure data. Fields that cannot be
written as data (callables, process hooks, objects) are listed with the reason they are left out.
tests/unit/test_transformer_fields.py runs `render()` and compares it with the committed file.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path

SNAPSHOT = Path(__file__).resolve().parents[2] / "bridge" / "models" / "transformer_fields.py"

# Fields that hold Python objects, not configuration values: the provider never carries them.
EXCLUDED = {
    "timers": "runtime hook set by the training loop",
    "finalize_model_grads_func": "runtime hook set by the training loop",
    "grad_scale_func": "runtime hook set by the training loop",
    "no_sync_func": "runtime hook set by the training loop",
    "grad_sync_func": "runtime hook set by the training loop",
    "param_sync_func": "runtime hook set by the training loop",
    "_cpu_offloading_context": "private runtime state of Megatron-Core",
    "init_method": "callable; Megatron-Core derives it from init_method_std",
    "output_layer_init_method": "callable; Megatron-Core derives it from init_method_std and num_layers",
    "embedding_init_method": "callable; Megatron-Core derives it from embedding_init_method_std",
    "quant_recipe": "a Megatron-Core RecipeConfig object, not data",
}

# Fields whose Megatron-Core value is an object: the provider holds a name, mapped back when the
# TransformerConfig is built (GPTModelProvider._megatron_value).
BY_NAME = {
    "params_dtype": ("str", "fp32"),
    "pipeline_dtype": ("str | None", None),
    "autocast_dtype": ("str | None", None),
    "activation_func": ("str", "gelu"),
    "attention_backend": ("str", "auto"),
}


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


def _is_list(tp) -> bool:
    return typing.get_origin(tp) is list


def _scalar_name(tp) -> str | None:
    if tp in (int, float, bool, str):
        return tp.__name__
    if typing.get_origin(tp) is typing.Literal:
        return "str"
    return None


def _yaml_type(tp) -> tuple[str, tuple | None, str | None]:
    """(annotation, Literal choices or None, note on narrowing or None) for one field type."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "str", typing.get_args(tp), None
    scalar = _scalar_name(tp)
    if scalar:
        return scalar, None, None
    if _is_list(tp):
        (item,) = typing.get_args(tp)
        inner = _scalar_name(item)
        if inner is None:
            raise _Skip
        return f"list[{inner}]", None, None
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and typing.get_origin(rest[0]) is tuple:
            inner = {_scalar_name(a) for a in typing.get_args(rest[0])}
            if len(inner) != 1 or None in inner:
                raise _Skip
            ann = f"list[{inner.pop()}]"
            return (f"{ann} | None" if optional else ann), None, "a tuple in Megatron-Core; a list here"
        if len(rest) == 1:
            ann, choices, note = _yaml_type(rest[0])
            return (f"{ann} | None" if optional else ann), choices, note
        # Union[X, List[X], ...]: OmegaConf has no Union; keep the scalar form.
        scalars = [a for a in rest if _scalar_name(a)]
        if not scalars:
            raise _Skip
        ann, choices, _ = _yaml_type(scalars[0])
        note = "Union in Megatron-Core; only the scalar form here"
        return (f"{ann} | None" if optional else ann), choices, note
    raise _Skip


def render() -> str:
    from megatron.core import __version__ as mcore_version
    from megatron.core.transformer import TransformerConfig

    lines: list[str] = []
    choices: dict[str, tuple] = {}
    notes: dict[str, str] = {}
    excluded: dict[str, str] = {}
    for f in dataclasses.fields(TransformerConfig):
        if f.name in EXCLUDED:
            excluded[f.name] = EXCLUDED[f.name]
            continue
        if f.name in BY_NAME:
            ann, default = BY_NAME[f.name]
            lines.append(f"    {f.name}: {ann} = {_py(default)}  # by name")
            continue
        try:
            ann, ch, note = _yaml_type(f.type)
        except _Skip:
            raise SystemExit(
                f"{f.name}: type {f.type} has no YAML form; add it to EXCLUDED or BY_NAME"
            ) from None
        if ch:
            choices[f.name] = ch
        if note:
            notes[f.name] = note
        if f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
            factory = {list: "list", dict: "dict"}.get(type(value))
            if factory is None or value:
                raise SystemExit(f"{f.name}: default factory {f.default_factory} is not an empty list/dict")
            lines.append(f"    {f.name}: {ann} = field(default_factory={factory})")
        else:
            default = f.default
            if isinstance(default, tuple):
                default = list(default)
            lines.append(f"    {f.name}: {ann} = {_py(default)}")

    def fmt_dict(name: str, d: dict) -> str:
        body = "".join(f"    {_py(k)}: {_py(v)},\n" for k, v in d.items())
        return f"{name} = {{\n{body}}}\n"

    return (
        '"""Every YAML-friendly field of Megatron-Core\'s TransformerConfig, with its default.\n\n'
        "GENERATED by scripts/dev/snapshot_transformer_fields.py from the installed megatron-core; do not\n"
        "edit by hand. tests/unit/test_transformer_fields.py fails when this file and the installed release\n"
        "disagree. Pure data: importing this module imports neither torch nor megatron.core.\n"
        '"""\n\n'
        "from dataclasses import dataclass, field\n\n"
        f"MEGATRON_CORE_VERSION = {_py(mcore_version)}\n\n"
        "# TransformerConfig fields that hold objects, not values; the provider leaves them to Megatron-Core.\n"
        + fmt_dict("EXCLUDED_FIELDS", excluded)
        + "\n# Fields whose Megatron-Core type is a Literal: the allowed strings.\n"
        + fmt_dict("FIELD_CHOICES", choices)
        + "\n# Fields whose type had to be narrowed to be YAML-friendly.\n"
        + fmt_dict("NARROWED_FIELDS", notes)
        + "\n\n@dataclass\nclass TransformerFields:\n"
        '    """TransformerConfig\'s fields as data; dtypes, activation and attention backend by name."""\n\n'
        + "\n".join(lines)
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the snapshot is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
        if current != text:
            print(f"{SNAPSHOT} is out of date; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    SNAPSHOT.write_text(text)
    print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
