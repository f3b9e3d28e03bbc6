"""Where the config.json of a run's consolidated Hugging Face copies comes from
(checkpoint.save_consolidated); pure Python, so the dry run refuses what the run would.

In order: checkpoint.hf_architecture (the run's own model as that architecture), the Hugging Face
folder the run starts from (checkpoint.pretrained_checkpoint), or the HF assets an import recorded in
the torch_dist checkpoint it starts from. A run with none of them cannot name its architecture.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bridge.checkpoint.paths import HF_ASSETS_DIR, is_hf_folder
from bridge.errors import ConfigError
from bridge.models import hf_architecture


@dataclass(frozen=True)
class ConsolidatedSource:
    hf_folder: str | None = None  # config.json (and tokenizer files) copied from here
    architecture: str | None = None  # else config.json generated from the run's model as this


def consolidated_source(cfg) -> ConsolidatedSource:
    """The source of the consolidated copies' config.json; a ConfigError when there is none."""
    c = cfg.checkpoint
    if c.hf_architecture:
        hf_architecture.check_supported(c.hf_architecture)  # an unknown one lists the supported ones
        try:
            hf_architecture.check_expressible(cfg.model, c.hf_architecture)
        except ConfigError as err:
            raise ConfigError(
                f"checkpoint.hf_architecture = {c.hf_architecture!r}: cannot express this run's model ({err}). "
                "Fix: name the architecture of the model's family, or remove checkpoint.hf_architecture"
            ) from None
        return ConsolidatedSource(architecture=c.hf_architecture)
    start = c.pretrained_checkpoint
    if start and is_hf_folder(start):
        return ConsolidatedSource(hf_folder=start)
    if start and os.path.isfile(os.path.join(start, HF_ASSETS_DIR, "config.json")):
        return ConsolidatedSource(hf_folder=os.path.join(start, HF_ASSETS_DIR))
    raise ConfigError(
        "checkpoint.save_consolidated = True: the Hugging Face copy needs an architecture, and this run "
        "starts from no Hugging Face folder or imported checkpoint. Fix: set checkpoint.hf_architecture "
        f"(one of {', '.join(hf_architecture.supported_architectures())}), or start from a Hugging Face folder "
        "(checkpoint.pretrained_checkpoint)"
    )
