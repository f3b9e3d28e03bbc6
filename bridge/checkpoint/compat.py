"""Does a checkpoint fit the model it is about to be loaded into? Checked before any tensor is read.

Three checks, each a ConfigError naming what differs (instead of dist_checkpointing's traceback, or a
silent drop):
  * the run_config.yaml saved next to the checkpoint records the model section: RoPE settings
    (rotary_base, rotary_percent, rope_scaling*) and share_embeddings_and_output_weights must equal
    the model's;
  * every tensor the model asks for is in the checkpoint's metadata with the same global shape;
  * a checkpoint with an output layer loaded into a tied model (or the reverse) is refused, as are
    other model tensors of the checkpoint that no rank of the model asks for (strict loads).
Every rank sees the union of all ranks' requests (all_gather_object), so all raise together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bridge.checkpoint.paths import RUN_CONFIG_FILENAME
from bridge.errors import ConfigError
from bridge.parallel import ranks

ROPE_FIELDS = ("rotary_base", "rotary_percent", "rope_scaling")
ROPE_SCALING_FIELDS = (
    "rope_scaling_factor",
    "rope_scaling_low_freq_factor",
    "rope_scaling_high_freq_factor",
    "rope_scaling_original_max_position_embeddings",
)
TIED = "share_embeddings_and_output_weights"
OUTPUT = "output_layer.weight"
MODEL_PREFIXES = ("embedding.", "decoder.", "output_layer.")  # GPTModel's top-level modules


def saved_model_section(target: Path) -> dict | None:
    """The `model:` section of the run_config.yaml saved with the checkpoint, if there is one."""
    path = Path(target) / RUN_CONFIG_FILENAME
    if not path.is_file():
        return None

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, dict) else None


def _get(config: Any, name: str) -> Any:
    if config is None:
        return None
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def current_model_values(chunks: list, model_config: Any = None) -> dict:
    """The compared fields of the model being loaded: from `model_config` (provider or dict) when
    given, else what the built GPTModel records (rotary_base, rope_scaling, tied embeddings)."""
    values = {}
    if model_config is not None:
        for name in (*ROPE_FIELDS, *ROPE_SCALING_FIELDS, TIED, "position_embedding_type"):
            value = _get(model_config, name)
            if value is not None:
                values[name] = value
        return values
    model = chunks[0] if chunks else None
    for name, attr in (("rotary_base", "rotary_base"), ("rope_scaling", "rotary_scaling"), (TIED, TIED)):
        value = getattr(model, attr, None)
        if value is not None:
            values[name] = value
    if model is not None and getattr(model, "position_embedding_type", None) is not None:
        values["position_embedding_type"] = model.position_embedding_type
    return values


def check_run_config(target: Path, current: dict) -> None:
    saved = saved_model_section(target)
    if not saved:
        return
    names = [TIED]
    rope = (
        saved.get("position_embedding_type", "rope") == "rope"
        and current.get("position_embedding_type", "rope") == "rope"
    )
    if rope:
        names += ROPE_FIELDS
        if saved.get("rope_scaling") and current.get("rope_scaling"):
            names += ROPE_SCALING_FIELDS
    diffs = [
        f"{n}: checkpoint {saved[n]!r}, model {current[n]!r}"
        for n in names
        if n in saved and n in current and _differs(saved[n], current[n])
    ]
    if diffs:
        raise ConfigError(
            f"checkpoint {target} was trained with another model: {'; '.join(diffs)} (from its "
            f"{RUN_CONFIG_FILENAME}). Fix: set model.<field> to the checkpoint's value, or load a "
            "checkpoint of this model"
        )


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) != float(b)
    return a != b


def requested_tensors(sharded_state_dict: dict) -> dict[str, tuple[int, ...]]:
    """Global key -> global shape of every ShardedTensor the model asks for (factories built)."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory

    out: dict[str, tuple[int, ...]] = {}

    def visit(value: Any) -> None:
        if isinstance(value, ShardedTensor):
            out[value.key] = tuple(value.global_shape)
        elif isinstance(value, ShardedTensorFactory):
            try:
                built = value.build()
            except Exception:  # noqa: BLE001 - a factory we cannot expand is left to dist_checkpointing
                return
            for v in nested_values(built) if isinstance(built, (dict, list)) else [built]:
                visit(v)

    for v in nested_values(sharded_state_dict):
        visit(v)
    return out


def _all_ranks_union(local: dict) -> dict:
    if ranks.world_size() == 1:
        return dict(local)
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    union: dict = {}
    for part in gathered:
        union.update(part)
    return union


def check_tensors(
    target: Path, requested: dict[str, tuple[int, ...]], tied: bool | None, strict: bool
) -> None:
    from megatron.core import dist_checkpointing

    saved = {
        k: tuple(v.global_shape) for k, v in dist_checkpointing.load_tensors_metadata(str(target)).items()
    }
    saved_model = {k for k in saved if k.startswith(MODEL_PREFIXES)}
    tied_hint = (
        "Fix: set model.share_embeddings_and_output_weights to the value the checkpoint was saved with "
        "(HF tie_word_embeddings)"
    )
    if OUTPUT in saved and OUTPUT not in requested and tied:
        raise ConfigError(
            f"checkpoint {target} has a separate {OUTPUT} (saved untied) but the model ties it to the "
            f"input embedding (share_embeddings_and_output_weights=True): it would be dropped. {tied_hint}"
        )
    if OUTPUT in requested and OUTPUT not in saved and "embedding.word_embeddings.weight" in saved:
        raise ConfigError(
            f"checkpoint {target} has no {OUTPUT} (saved with tied embeddings) but the model has its own "
            f"output layer (share_embeddings_and_output_weights=False). {tied_hint}"
        )
    missing = sorted(k for k in requested if k not in saved)
    if missing:
        raise ConfigError(
            f"checkpoint {target} lacks {len(missing)} tensor(s) the model needs, e.g. {missing[:3]}; "
            "it was saved from another architecture. Fix: load a checkpoint of this model"
        )
    for key in sorted(requested):
        if requested[key] != saved[key]:
            raise ConfigError(
                f"checkpoint {target}: tensor {key!r} has shape {list(saved[key])} in the checkpoint "
                f"but {list(requested[key])} in the model. Fix: set the model fields to the checkpoint's "
                "(hidden_size, num_layers, ffn_hidden_size, num_query_groups, vocab_size / "
                "make_vocab_size_divisible_by / should_pad_vocab, ...) or load a checkpoint of this model"
            )
    unused = sorted(saved_model - set(requested))
    if strict and unused:
        raise ConfigError(
            f"checkpoint {target} holds {len(unused)} model tensor(s) this model has no place for, e.g. "
            f"{unused[:3]}. Fix: load a checkpoint of this model"
        )


def check_compatible(target: Path, chunks: list, sharded_state_dict: dict, model_config: Any = None,
                     *, strict: bool = True) -> None:  # fmt: skip
    """Raise ConfigError (on every rank) when the checkpoint at `target` does not fit the model."""
    current = current_model_values(chunks, model_config)
    check_run_config(target, current)
    requested = _all_ranks_union(requested_tensors(sharded_state_dict))
    check_tensors(target, requested, current.get(TIED), strict)
