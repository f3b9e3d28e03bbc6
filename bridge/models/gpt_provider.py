"""GPTModelProvider: a GPT model and its parallel sizes described as data, built on Megatron-Core on demand.

Pure data: defining, overriding, validating and serialising a provider imports neither torch nor
megatron.core. The fields are GPTFields (provider_fields); the jobs done on them live beside this module,
one each, and read a GPTFields: the field checks (provider_checks), the layout derivation
(provider_layout: `derive_layout(provider, world_size)`), the Megatron-Core build (provider_build) and the
distributed build (provider_distributed). The methods here are Megatron-Bridge's interface to them;
`transformer_config()`, `provide()` and `provide_distributed_model()` import torch and megatron.core
when a model is actually built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.models import provider_build, provider_checks, provider_distributed, provider_layout
from bridge.models.provider_build import MCORE_ROPE_SCALING_DEFAULTS
from bridge.models.provider_checks import (
    ACTIVATIONS,
    LAYERNORM_PLACEMENTS,
    POSITION_EMBEDDINGS,
    QK_LAYERNORM_SCOPES,
)
from bridge.models.provider_fields import DEFAULTS_DIFFERING_FROM_MCORE, GPTFields, transformer_field_names

if TYPE_CHECKING:
    from bridge.parallel.layout import ModelShape, ParallelLayout

# The provider and the vocabulary of its by-name fields (defined beside it, in provider_checks / provider_build).
__all__ = [
    "ACTIVATIONS",
    "DEFAULTS_DIFFERING_FROM_MCORE",
    "LAYERNORM_PLACEMENTS",
    "MCORE_ROPE_SCALING_DEFAULTS",
    "POSITION_EMBEDDINGS",
    "QK_LAYERNORM_SCOPES",
    "GPTModelProvider",
    "transformer_field_names",
]


@dataclass
class GPTModelProvider(GPTFields):
    """A GPT model by Megatron-Core's own field names (the fields: bridge.models.provider_fields.GPTFields),
    and what it builds: `finalize()` checks the fields, `transformer_config()` / `provide()` /
    `provide_distributed_model()` build Megatron-Core's objects (importing torch and megatron.core then)."""

    # ---- pure-data checks and views -------------------------------------------------------------

    def finalize(self) -> None:
        """Check the model fields (the layout rules: provider_layout.derive_layout); raise ConfigError."""
        provider_checks.check_fields(self)

    def model_shape(self) -> ModelShape:
        """The model facts the layout rules and the planner need."""
        return provider_layout.model_shape(self)

    # ---- Megatron-Core objects (import torch / megatron.core) ------------------------------------

    def megatron_value(self, name: str) -> Any:
        """The value TransformerConfig gets for field `name` (names mapped to dtypes/callables)."""
        return provider_build.megatron_value(self, name)

    def transformer_config(self):
        """Build megatron.core's TransformerConfig from this provider (raises ConfigError)."""
        return provider_build.transformer_config(self)

    def provide(
        self, pre_process: bool | None = None, post_process: bool | None = None, vp_stage: int | None = None
    ):
        """Build one GPTModel stage for this rank; pre/post default to this rank's pipeline position."""
        return self.provide_stage(self.transformer_config(), pre_process, post_process, vp_stage)

    def provide_stage(
        self, config, pre_process: bool | None, post_process: bool | None, vp_stage: int | None
    ):
        """One model stage on a built TransformerConfig, of the class `stage_model` names."""
        return provider_build.build_stage(self, config, pre_process, post_process, vp_stage, self.stage_model)

    def stage_model(self, pre_process: bool) -> tuple[type, dict[str, Any]]:
        """The model class of a stage and its extra constructor arguments; a provider kind overrides it
        (VLMModelProvider: the image side on the first stage)."""
        from megatron.core.models.gpt import GPTModel  # megatron.core at build only: the provider stays light

        return GPTModel, {}

    def register_post_build_hook(
        self, hook: Callable[[list], None], *, replaces_weights: bool = False
    ) -> None:
        """Run `hook(chunks)` in provide_distributed_model() on the built GPTModel chunks, before the
        Float16Module / DDP wrappers (e.g. AutoBridge loading HF weights). Hooks run in order; they are
        not fields (not serialised, not copied by dataclasses.replace). `replaces_weights=True` says the
        hook overwrites every parameter, so random initialisation is skipped by default."""
        self.__dict__.setdefault("_post_build_hooks", []).append((hook, replaces_weights))

    def post_build_hooks(self) -> tuple:
        return tuple(hook for hook, _ in self.__dict__.get("_post_build_hooks", ()))

    def hooks_replace_weights(self) -> bool:
        """Whether a registered post-build hook overwrites every parameter."""
        return any(replaces for _, replaces in self.__dict__.get("_post_build_hooks", ()))

    def provide_distributed_model(
        self,
        wrap_with_ddp: bool = True,
        ddp_config: Any = None,
        mixed_precision_wrapper: bool = True,
        data_parallel_random_init: bool = False,
        seed: int = 1234,
        random_init: bool | None = None,
        meta_device: bool = False,
        layout: ParallelLayout | None = None,
    ) -> list:
        """The model chunks of this rank (one per virtual pipeline stage), ready for training.

        Initializes torch.distributed and the model-parallel groups for this provider's layout when
        they are not initialized yet (one process when not under torchrun). `layout`: the run's layout
        (the RunPlan's), which must agree with this provider's sizes; None derives it from them when the
        groups need initializing. `ddp_config` is a
        megatron.core DistributedDataParallelConfig or a dict of its fields. `data_parallel_random_init`
        broadcasts data-parallel rank 0's weights to the other replicas (as Megatron-LM's flag does).
        `random_init=False` (default: False when a hook replaces the weights, else True) skips random initialisation because every weight will be overwritten (by
        a post-build hook or a checkpoint load): Megatron-Core gets no-op init methods on its in-place
        path, so the tensor-parallel attributes stay marked (perform_initialization=False would drop
        them). Post-build hooks (register_post_build_hook) run on the bare chunks before any wrapper.
        `meta_device=True`: every parameter on the meta device (shapes, dtypes and sharding only, no
        memory), for conversions that stream the weights (bridge.conversion.streaming); no DDP wrapper.
        """
        return provider_distributed.provide_distributed_model(
            self,
            wrap_with_ddp=wrap_with_ddp,
            ddp_config=ddp_config,
            mixed_precision_wrapper=mixed_precision_wrapper,
            data_parallel_random_init=data_parallel_random_init,
            seed=seed,
            random_init=random_init,
            meta_device=meta_device,
            layout=layout,
        )
