"""checkpoint.save_consolidated: a Hugging Face copy of the weights inside each saved checkpoint.

`<save>/iter_N/consolidated/` holds config.json (+ tokenizer files when the run started from an HF
folder) and safetensors with the family's HF names, gathered across TP / PP / EP and, for strategy
fsdp2, across the data-parallel shards; `transformers.AutoModelForCausalLM.from_pretrained` loads it.
It is written into the checkpoint's staging folder, so it is published (and covered by the manifest)
with the checkpoint, never on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bridge.checkpoint.paths import CONSOLIDATED_DIR
from bridge.config.consolidated import consolidated_source


def consolidated_writer(cfg, provider, model: list) -> Callable[[Path], None] | None:
    """The save hook writing the HF copy (None without checkpoint.save_consolidated); the source of its
    config.json is bridge.config.consolidated's, which validation already accepted."""
    if not cfg.checkpoint.save_consolidated:
        return None
    from bridge.conversion.auto_bridge import AutoBridge

    source = consolidated_source(cfg)
    if source.hf_folder is not None:
        bridge = AutoBridge.from_hf_pretrained(source.hf_folder)
    else:
        bridge = AutoBridge.from_provider(provider, source.architecture)

    def write(staging: Path) -> None:  # on every rank: the gather is collective, rank 0 writes
        # A source tensor no parameter holds (e.g. MTP layers a finetune switched off) is carried from the
        # source folder's files; a source without files lists what the copy leaves out (not a failed save).
        bridge.save_hf_pretrained(model, staging / CONSOLIDATED_DIR, progress=False, omit_unmapped=True)

    return write
