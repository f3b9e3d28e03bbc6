"""VLMModelProvider: a vision-language model as data: a GPT language model, an image side, their HF config.

The language model is described by the GPTModelProvider fields themselves (a subclass, so every text
family's fields, layout rules, planner sizing, recipes and mapping rows apply unchanged, and the run's
`model` section stays one provider); the image side is the HF config of the checkpoint minus its text
part (`vlm_config`: `architectures`, `vision_config`, the projector and image-token keys), built by the
family folder's `vision.py` (transformers' own vision tower and projector) on the first pipeline stage.
Pure data: building imports torch, megatron.core and transformers inside the build functions only.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from bridge.models.families import architecture_families, families
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.provider_checks import model_error


class VisionSizes(NamedTuple):
    """A vision-language model's image side, sized for the planner (one image per sample)."""

    encoder: int  # vision tower parameters
    projector: int  # projector parameters
    image_tokens: int  # placeholder tokens per image (within seq_length)
    activations: int  # values one image keeps for the backward pass, with the provider's freeze flags


@dataclass
class VLMModelProvider(GPTModelProvider):
    """GPTModelProvider fields (the language model) plus the image side of a vision-language model."""

    # The HF config.json of the whole model without `text_config`'s values (whose math is the GPT fields):
    # architectures, model_type, vision_config, projector and image-token keys, text_config.model_type.
    vlm_config: dict[str, Any] = field(default_factory=dict)
    freeze_vision_model: bool = (
        True  # the vision encoder's weights get no gradient (Megatron-Bridge's default)
    )
    freeze_vision_projection: bool = False  # the projector trains unless frozen
    # the language model's weights (embedding, decoder, output layer) get no gradient: Megatron-Bridge's
    # `*_pretrain_mock` vision-language recipes train the projector alone
    freeze_language_model: bool = False

    def finalize(self) -> None:
        super().finalize()
        self.vision_family()
        why = self.context_parallel_refused()
        if self.context_parallel_size > 1 and why is not None:
            raise model_error(
                "context_parallel_size",
                self.context_parallel_size,
                f"context parallelism is refused for the {self.vision_family()} family: {why}",
                "set model.context_parallel_size=1",
            )

    def vision_family(self) -> str:
        """The family folder whose `vision.py` builds this model's image side (from vlm_config)."""
        archs = self.vlm_config.get("architectures")
        if not archs:
            raise model_error(
                "vlm_config",
                "{...}" if self.vlm_config else {},
                "names no `architectures`: the vision-language family is read from it",
                "build the provider from the checkpoint (AutoBridge) or a family preset",
            )
        name = next((architecture_families()[a] for a in archs if a in architecture_families()), None)
        if name is None:
            raise model_error(
                "vlm_config.architectures",
                archs,
                "no family converts these architectures",
                "build the provider from the checkpoint (AutoBridge) or a family preset",
            )
        if families()[name].vision_module is None:
            raise model_error(
                "vlm_config.architectures",
                archs,
                f"family {name} has no vision.py (it is not a vision-language family)",
                "use a GPTModelProvider for a text model",
            )
        return name

    def vision_sizes(self) -> VisionSizes | None:
        """The image side's sizes from the family's pure `vision_size.py` (no torch), for the planner; None
        when the family has none."""
        name = f"bridge.models.{self.vision_family()}.vision_size"
        if importlib.util.find_spec(name) is None:
            return None
        module = importlib.import_module(name)
        encoder, projector = module.vision_parameters(self.vlm_config, self.hidden_size)
        kept_encoder, kept_projector = module.activations(self.vlm_config, self.hidden_size)
        # a trained encoder keeps its own and the projector's inputs; a frozen one none, and the projector
        # its own only when it trains (the language model's gradient stops at frozen image features)
        kept = (
            kept_encoder + kept_projector
            if not self.freeze_vision_model
            else kept_projector
            if not self.freeze_vision_projection
            else 0
        )
        return VisionSizes(encoder, projector, module.image_tokens(self.vlm_config), kept)

    def packing_refused(self) -> str | None:
        """Why the family refuses packed image-text rows (its folder's `PACKING_REFUSED`), None when it
        packs them; a family that declares nothing is refused (packing is allowed where it is tested)."""
        package = importlib.import_module(f"bridge.models.{self.vision_family()}")
        return getattr(package, "PACKING_REFUSED", "its folder declares no PACKING_REFUSED (not tested)")

    def context_parallel_refused(self) -> str | None:
        """Why the family refuses context parallelism (its folder's `CONTEXT_PARALLEL_REFUSED`), None when
        it takes it (tested against transformers); a family that declares nothing is refused."""
        package = importlib.import_module(f"bridge.models.{self.vision_family()}")
        return getattr(package, "CONTEXT_PARALLEL_REFUSED", "its folder declares no CONTEXT_PARALLEL_REFUSED")

    def vision_module(self):
        """The family's vision module (bridge.models.<family>.vision; imports torch and transformers)."""
        return importlib.import_module(families()[self.vision_family()].vision_module)

    def stage_model(self, pre_process: bool) -> tuple[type, dict[str, Any]]:
        """The model class build_stage makes and its extra arguments: the image side on the first stage,
        the family's position ids (its vision module's `position_ids`) and attention-mask rule
        (`attention_mask_of`), if any, on every stage."""
        from bridge.models.vlm_model import VisionLanguageModel  # torch / megatron.core: at build only

        module = self.vision_module()
        vision = None
        if pre_process:
            vision = module.build(self.vlm_config, self.hidden_size)
            for param in vision.encoder().parameters():
                param.requires_grad_(not self.freeze_vision_model)
            for param in vision.projector().parameters():
                param.requires_grad_(not self.freeze_vision_projection)
        # The family's position ids from tokens and images (M-RoPE), on every stage: each applies RoPE.
        hook = getattr(module, "position_ids", None)
        positions = None if hook is None else functools.partial(hook, self.vlm_config)
        mask_of = getattr(module, "attention_mask_of", None)
        deepstack = getattr(module, "deepstack_layers", None)  # visual residuals after the first layers
        return VisionLanguageModel, {
            "freeze_language_model": self.freeze_language_model,
            "deepstack_layers": deepstack(self.vlm_config) if deepstack is not None else 0,
            "vision": vision,
            "positions": positions,
            "attention_mask_of": mask_of(self.vlm_config) if mask_of is not None else None,
            # sequence parallelism: the embeddings stay whole until the image features are merged
            # (VisionLanguageModel scatters them then)
            "scatter_embedding_sequence_parallel": False,
        }
