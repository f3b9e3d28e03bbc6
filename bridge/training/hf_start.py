"""Start a run from a Hugging Face model folder: `checkpoint.pretrained_checkpoint=HF_DIR`.

The model section takes its architecture from the folder's config.json (bridge.models.hf_architecture,
applied by bridge.config.compose and checked by bridge.config.finetune_rules.check_hf_start); here the
weights stream in through AutoBridge on every rank for its own shards while the model is built.
"""

from __future__ import annotations

from bridge.models.gpt_provider import GPTModelProvider


def stream_hf_weights(provider: GPTModelProvider, path: str) -> None:
    """Load the folder's safetensors into each chunk as it is built (this rank's shards only)."""
    from bridge.conversion.auto_bridge import AutoBridge

    provider.register_post_build_hook(
        AutoBridge.from_hf_pretrained(path).load_hf_weights, replaces_weights=True
    )
