"""NeMo AutoModel's `distributed:` YAML form, mapped onto ConfigContainer fields (docs/parallelism.md,
"The AutoModel `distributed:` YAML form").

    distributed:                      -> (ConfigContainer field)
      strategy: fsdp2                 -> distributed.strategy
      tp_size / pp_size / cp_size / ep_size
                                      -> model.tensor_model_parallel_size / pipeline_ / context_ / expert_
      dp_size: none                   -> distributed.dp_size (None = derived; a number is checked against
                                         world / (tp * pp * cp) by validate())
      dp_replicate_size               -> distributed.dp_replicate_size
      sequence_parallel               -> model.sequence_parallel
      activation_checkpointing        -> distributed.activation_checkpointing
      pipeline:
        pp_schedule                   -> distributed.pp_schedule (1f1b, interleaved1f1b/interleaved_1f1b,
                                         gpipe, looped_bfs, dfs, zero_bubble, v_schedule; torch's class names
                                         LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble too; any case)
        pp_microbatch_size            -> train.micro_batch_size
        scale_grads_in_schedule       -> distributed.scale_grads_in_schedule
        layers_per_stage              -> model.virtual_pipeline_model_parallel_size = num_layers / (pp * it)
    packed_sequence.packed_sequence_size -> dataset.packed_sequence_size
    step_scheduler: global_batch_size / local_batch_size / max_steps / ckpt_every_steps / val_every_steps
                                      -> train.global_batch_size / train.micro_batch_size / train.train_iters /
                                         checkpoint.save_interval / validation.eval_interval

      defer_fsdp_grad_sync            -> distributed.defer_fsdp_grad_sync (fsdp2 only)
      moe.reshard_after_forward       -> distributed.moe_reshard_after_forward (fsdp2, ep_size > 1)
      moe.activation_checkpointing    -> distributed.activation_checkpointing
    checkpoint.model_save_format: safetensors
                                      -> (accepted: consolidated copies, checkpoint.save_consolidated, are
                                         safetensors; the sharded state is torch_dist / torch DCP)

The other keys that only tune AutoModel's own FSDP2 implementation (`pipeline.patch_*`, the remaining
`moe:` keys) are accepted only with strategy fsdp2, and each one accepted produces a warning saying it is
ignored; with any other strategy they are a ConfigError (AutoModel itself rejects FSDP2 settings on other
strategies). `moe:` also needs ep_size > 1, as in AutoModel. Any other key fails with the supported keys listed. Sizes given both
ways in one file (e.g. `distributed.tp_size: 2` and `model.tensor_model_parallel_size: 4`) must agree.
Keys of the file in the ConfigContainer's own shape pass through unchanged.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from bridge.config.tree import suggest
from bridge.errors import ConfigError, config_error
from bridge.parallel import schedules
from bridge.parallel.sizes import FIELD_OF

# AutoModel's <short>_size keys name the model-parallel sizes (bridge.parallel.sizes) it has.
DISTRIBUTED_KEYS = {
    **{f"{short}_size": f"model.{FIELD_OF[short]}" for short in ("tp", "pp", "cp", "ep")},
    "dp_size": "distributed.dp_size",
    "sequence_parallel": "model.sequence_parallel",
}
PIPELINE_KEYS = {
    "pp_schedule": "distributed.pp_schedule",
    "pp_microbatch_size": "train.micro_batch_size",
    "scale_grads_in_schedule": "distributed.scale_grads_in_schedule",
}
SECTION_KEYS = {
    "packed_sequence": {"packed_sequence_size": "dataset.packed_sequence_size"},
    "step_scheduler": {
        "global_batch_size": "train.global_batch_size",
        "local_batch_size": "train.micro_batch_size",
        "max_steps": "train.train_iters",
        "ckpt_every_steps": "checkpoint.save_interval",
        "val_every_steps": "validation.eval_interval",
    },
}
# AutoModel FSDP2-implementation knobs with no Megatron-Core meaning (see module docstring).
FSDP2_ONLY_PIPELINE = {"patch_inner_model", "patch_causal_lm_model"}
MOE_FIELDS = {  # moe: keys that are fields of the container
    "reshard_after_forward": "distributed.moe_reshard_after_forward",
    "activation_checkpointing": "distributed.activation_checkpointing",
}
MOE_KEYS = {
    *MOE_FIELDS,
    "ignore_router_for_ac",
    "wrap_outer_model",
    "lm_head_precision",
    "mp_policy",
    "offload_policy",
    "activation_checkpointing_modules",
}
# checkpoint.model_save_format: the format of AutoModel's consolidated copies; bridge writes safetensors
MODEL_SAVE_FORMATS = ("safetensors",)
# AutoModel configs write `dp_size: none`; YAML reads that as the string "none", which means "unset" here.
_NONE_STRINGS = ("none", "None")


def automodel_keys() -> list[str]:
    """The AutoModel spellings this module understands, as dotted keys (for "did you mean" hints)."""
    keys = [f"distributed.{k}" for k in DISTRIBUTED_KEYS]
    keys += [f"distributed.pipeline.{k}" for k in (*PIPELINE_KEYS, "layers_per_stage", *FSDP2_ONLY_PIPELINE)]
    keys += [f"distributed.moe.{k}" for k in MOE_KEYS]
    keys += [f"{section}.{k}" for section, names in SECTION_KEYS.items() for k in names]
    return [*keys, "checkpoint.model_save_format"]


def is_automodel_form(data: dict) -> bool:
    dist = data.get("distributed")
    automodel_keys = set(DISTRIBUTED_KEYS) | {"pipeline", "moe"}
    ckpt = data.get("checkpoint")
    return (
        (isinstance(dist, dict) and bool(automodel_keys & set(dist)))
        or bool(set(SECTION_KEYS) & set(data))
        or (isinstance(ckpt, dict) and "model_save_format" in ckpt)
    )


@dataclass(frozen=True)
class DerivedSettings:
    """What an AutoModel file gives relative to other fields, computed once everything is merged (the file
    and the command line: `model.num_layers=4` on the command line counts for `layers_per_stage`).

    `explicit_keys`: the container keys the file sets itself (its own shape or translated), so a derived
    value never replaces one the user wrote."""

    source: str = "config file"
    layers_per_stage: int | None = None
    interleaved_origin: str | None = None  # the file's key that asked for the interleaved schedule
    interleaved_written: Any = None  # and its value as written (interleaved1f1b, ...)
    explicit_keys: frozenset[str] = field(default_factory=frozenset)

    def apply(self, cfg: Any, explicit_keys: frozenset[str] = frozenset()) -> None:
        """Set model.virtual_pipeline_model_parallel_size from layers_per_stage on the merged `cfg` (in
        place); `explicit_keys`: the keys the command line set. Errors name the keys the file used."""
        explicit = self.explicit_keys | explicit_keys
        vpp_key = "model.virtual_pipeline_model_parallel_size"
        origin = "distributed.pipeline.layers_per_stage"
        if self.layers_per_stage is not None:
            derived = vpp_from_layers_per_stage(
                self.layers_per_stage,
                cfg.model.num_layers,
                cfg.model.pipeline_model_parallel_size or 1,
                self.source,
            )
            have = cfg.model.virtual_pipeline_model_parallel_size
            if vpp_key in explicit and have != derived:
                raise ConfigError(
                    f"{self.source}: {origin}={self.layers_per_stage!r} gives {vpp_key}={derived!r}, but "
                    f"{vpp_key}={have!r} is set too. Fix: give one of them."
                )
            cfg.model.virtual_pipeline_model_parallel_size = derived
        schedule = schedules.normalize(cfg.distributed.pp_schedule or "")
        if (
            self.interleaved_origin is not None
            and schedule == "interleaved_1f1b"
            and cfg.model.virtual_pipeline_model_parallel_size is None
        ):
            if self.layers_per_stage is None:
                rule = "interleaving needs virtual pipeline stages"
            else:
                rule = f"{origin}={self.layers_per_stage} gives one stage per pipeline rank: no interleaving"
            raise config_error(
                self.interleaved_origin,
                self.interleaved_written,
                f"{rule} ({self.source})",
                f"set {origin} so that model.num_layers ({cfg.model.num_layers}) / (pp_size "
                f"({cfg.model.pipeline_model_parallel_size}) * layers_per_stage) >= 2, or use pp_schedule 1f1b",
            )


def vpp_from_layers_per_stage(layers_per_stage: int, num_layers: int, pp: int, source: str) -> int | None:
    """model.virtual_pipeline_model_parallel_size for AutoModel's `layers_per_stage` (None: one stage per
    pipeline rank, no interleaving)."""
    stages, rest = divmod(num_layers, layers_per_stage)
    if rest or stages % pp:
        raise ConfigError(
            f"{source}: distributed.pipeline.layers_per_stage={layers_per_stage}: model.num_layers="
            f"{num_layers} must split into stages of {layers_per_stage} layers, a multiple of pp_size={pp} "
            "of them. Fix: pick layers_per_stage so that num_layers / (pp_size * layers_per_stage) is an integer."
        )
    vpp = stages // pp
    return vpp if vpp > 1 else None


def translate_automodel(
    data: dict[str, Any], base: Any, source: str = "config file"
) -> tuple[dict, list[str]]:
    """Map the AutoModel keys of `data` onto ConfigContainer keys; returns (dict in the container's shape,
    warnings). `base` is the tree the result will be merged into (for the model depth, the parallel sizes
    and the strategy where the file does not set them). Data without AutoModel keys comes back unchanged."""
    if not is_automodel_form(data):
        return data, []
    return _Translation(data, base, source).run()


def translate_automodel_deferred(
    data: dict[str, Any], base: Any, source: str = "config file"
) -> tuple[dict, list[str], DerivedSettings]:
    """As translate_automodel, but the values derived from other fields (the VPP of `layers_per_stage`)
    are left out and returned as DerivedSettings, to apply once the command line is merged too."""
    if not is_automodel_form(data):
        return data, [], DerivedSettings(source, explicit_keys=frozenset(_dotted(data)))
    translation = _Translation(data, base, source, derive=False)
    out, warnings = translation.run()
    schedule = translation.mapped.get("distributed.pp_schedule")
    derived = DerivedSettings(
        source,
        layers_per_stage=translation.layers_per_stage,
        interleaved_origin=schedule[1] if schedule and schedule[0] == "interleaved_1f1b" else None,
        interleaved_written=translation.pp_schedule_written,
        explicit_keys=frozenset(_dotted(out)),
    )
    return out, warnings, derived


def _dotted(data: dict, prefix: str = "") -> list[str]:
    """The dotted keys of a nested dict's leaves (section.field)."""
    keys = []
    for name, value in data.items():
        key = f"{prefix}{name}"
        keys += _dotted(value, key + ".") if isinstance(value, dict) and not prefix else [key]
    return keys


class _Translation:
    def __init__(self, data: dict, base: Any, source: str, derive: bool = True):
        self.data, self.base, self.source, self.derive = data, base, source, derive
        self.layers_per_stage: int | None = None  # what the file gave, derived or deferred
        self.pp_schedule_written: Any = None  # pipeline.pp_schedule as the file spells it
        self.out = copy.deepcopy({k: v for k, v in data.items() if k not in SECTION_KEYS})
        self.dist = dict(self.mapping(self.out.pop("distributed", None), "distributed"))
        self.mapped: dict[str, tuple[Any, str]] = {}  # container key -> (value, where it came from)
        self.warnings: list[str] = []
        self.strategy = self.dist.get("strategy", _get(base, "distributed.strategy"))

    def run(self) -> tuple[dict, list[str]]:
        layers_per_stage = moe = None
        for name in list(self.dist):
            value, origin = self.dist[name], f"distributed.{name}"
            if name in DISTRIBUTED_KEYS:
                del self.dist[name]
                self.put(DISTRIBUTED_KEYS[name], None if value in _NONE_STRINGS else value, origin)
            elif name == "dp_replicate_size" and value in _NONE_STRINGS:
                self.dist[name] = None
            elif name == "pipeline":
                del self.dist[name]
                layers_per_stage = self.pipeline(self.mapping(value, origin))
            elif name == "moe":
                del self.dist[name]
                moe = self.mapping(value, origin)
        # what is left in `dist` is in the container's own shape (strategy, dp_replicate_size, ...)
        for section, keys in SECTION_KEYS.items():
            if section not in self.data:
                continue
            for name, value in self.mapping(self.data[section], section).items():
                if name not in keys:
                    known = [f"{section}.{k}" for k in keys]
                    raise ConfigError(
                        f"{self.source}: unknown key {section}.{name}.{suggest(f'{section}.{name}', known)} "
                        f"Supported: {', '.join(known)}."
                    )
                self.put(keys[name], value, f"{section}.{name}")
        self.model_save_format()
        if moe is not None:
            self.moe(moe)
        self.layers_per_stage = layers_per_stage
        if layers_per_stage is not None and self.derive:
            self.put(
                "model.virtual_pipeline_model_parallel_size",
                self.vpp_from_layers_per_stage(layers_per_stage),
                "distributed.pipeline.layers_per_stage",
            )
        self.merge_into_out()
        return self.out, self.warnings

    # ---- helpers -------------------------------------------------------------------------------

    def mapping(self, value: Any, origin: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"{self.source}: {origin} must be a mapping, got {value!r}.")
        return value

    def put(self, key: str, value: Any, origin: str) -> None:
        if key in self.mapped and self.mapped[key][0] != value:
            first_value, first_origin = self.mapped[key]
            raise ConfigError(
                f"{self.source}: {first_origin}={first_value!r} and {origin}={value!r} set the same field "
                f"({key}) to different values. Fix: give it once."
            )
        self.mapped[key] = (value, origin)

    def current(self, key: str) -> Any:
        """The value `key` will have after the merge: this file's, else the base tree's."""
        if key in self.mapped:
            return self.mapped[key][0]
        section, field = key.split(".", 1)
        in_file = self.out.get(section)
        if isinstance(in_file, dict) and field in in_file:
            return in_file[field]
        return _get(self.base, key)

    def require_fsdp2(self, origin: str) -> None:
        if self.strategy != "fsdp2":
            raise ConfigError(
                f"{self.source}: {origin} is an FSDP2 setting of NeMo AutoModel and strategy is "
                f"{self.strategy!r}. Fix: remove it, or set distributed.strategy: fsdp2."
            )

    def fsdp2_only(self, origin: str) -> None:
        """An FSDP2 knob of AutoModel's own implementation: accepted (and ignored) with fsdp2 only."""
        self.require_fsdp2(origin)
        self.warnings.append(
            f"{origin} has no Megatron-Core equivalent and is ignored (accepted for strategy fsdp2)."
        )

    def pipeline(self, pipeline: dict) -> int | None:
        layers_per_stage = None
        for name, value in pipeline.items():
            origin = f"distributed.pipeline.{name}"
            if name == "pp_schedule":
                normalized = schedules.normalize(value)
                if normalized not in schedules.NAMES:
                    raise ConfigError(
                        f"{self.source}: {origin}={value!r} is not a pipeline schedule. Fix: use one of "
                        f"{', '.join(schedules.NAMES)} (interleaved1f1b = interleaved_1f1b)."
                    )
                self.put("distributed.pp_schedule", normalized, origin)
                self.pp_schedule_written = value
            elif name in ("pp_microbatch_size", "scale_grads_in_schedule"):
                self.put(PIPELINE_KEYS[name], value, origin)
            elif name == "layers_per_stage":
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{self.source}: {origin}={value!r}: must be a positive integer.")
                layers_per_stage = value
            elif name in FSDP2_ONLY_PIPELINE:
                self.fsdp2_only(origin)
            else:
                known = sorted({*PIPELINE_KEYS, "layers_per_stage", *FSDP2_ONLY_PIPELINE})
                raise ConfigError(
                    f"{self.source}: unknown key {origin}.{suggest(name, known)} Supported: {', '.join(known)}."
                )
        return layers_per_stage

    def vpp_from_layers_per_stage(self, layers_per_stage: int) -> int | None:
        num_layers = self.current("model.num_layers")
        pp = self.current("model.pipeline_model_parallel_size") or 1
        return vpp_from_layers_per_stage(layers_per_stage, num_layers, pp, self.source)

    def moe(self, moe: dict) -> None:
        ep = self.current("model.expert_model_parallel_size") or 1
        if ep <= 1:
            raise ConfigError(
                f"{self.source}: distributed.moe is given but ep_size={ep}: the moe sub-config only applies "
                "with expert parallelism. Fix: set distributed.ep_size > 1 or remove distributed.moe."
            )
        for name in moe:
            if name not in MOE_KEYS:
                raise ConfigError(
                    f"{self.source}: unknown key distributed.moe.{name}.{suggest(name, sorted(MOE_KEYS))} "
                    f"Supported: {', '.join(sorted(MOE_KEYS))}."
                )
            if name in MOE_FIELDS:
                self.require_fsdp2(f"distributed.moe.{name}")
                self.put(MOE_FIELDS[name], moe[name], f"distributed.moe.{name}")
            else:
                self.fsdp2_only(f"distributed.moe.{name}")

    def model_save_format(self) -> None:
        ckpt = self.out.get("checkpoint")
        if not isinstance(ckpt, dict) or "model_save_format" not in ckpt:
            return
        value = ckpt.pop("model_save_format")
        if value not in MODEL_SAVE_FORMATS:
            raise ConfigError(
                f"{self.source}: checkpoint.model_save_format={value!r}: bridge writes consolidated copies "
                "(checkpoint.save_consolidated) as safetensors and the sharded state as torch_dist / torch DCP. "
                "Fix: use model_save_format: safetensors, or remove the key."
            )

    def merge_into_out(self) -> None:
        if self.dist:
            self.out["distributed"] = self.dist
        for key, (value, origin) in self.mapped.items():
            section, field = key.split(".", 1)
            target = self.out.setdefault(section, {})
            if not isinstance(target, dict):
                raise ConfigError(f"{self.source}: {section} must be a mapping, got {target!r}.")
            if field in target and target[field] != value:
                raise ConfigError(
                    f"{self.source}: {origin}={value!r} and {key}={target[field]!r} set the same field to "
                    "different values. Fix: give it once."
                )
            target[field] = value


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj
