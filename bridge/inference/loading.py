"""A model to evaluate or serve: an HF folder (imported on the fly with AutoBridge) or a bridge checkpoint,
built at a TP / PP layout in the weights' dtype, with its tokenizer and EOS ids.

The same sources as scripts/inference/generate.py: `--hf-path` streams this rank's shards in at build;
`--megatron-path` builds from the HF config the checkpoint records (or `hf_config`) and loads the
torch_dist weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bridge.checkpoint import RUN_CONFIG_FILENAME, resolve_checkpoint
from bridge.conversion.fsdp2_refusal import refuse_fsdp2_checkpoint
from bridge.errors import config_error

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class LoadedModel:
    chunks: list  # this rank's model chunks (one: no virtual pipeline)
    provider: Any  # the GPTModelProvider it was built from
    folder: Path | None  # the HF folder of config / tokenizer / generation_config
    tokenizer: Any  # a transformers tokenizer, or None when the folder has none
    eos_token_ids: list[int]  # what the HF folder's generate() stops at ([] when none)
    name: str  # what clients call the model (the source path as given)


def check_layout(tp: int, pp: int, world_size: int, what: str) -> None:
    for flag, size in (("--tp", tp), ("--pp", pp)):
        if size < 1:
            raise config_error(flag, size, "must be a positive integer", f"pass {flag} 1 or more")
    if tp * pp != world_size:
        raise config_error(
            "--tp x --pp",
            f"{tp} x {pp} = {tp * pp}",
            f"must equal the number of processes ({world_size}): {what} runs one model replica",
            f"launch with torchrun --nproc_per_node={tp * pp}, or pick --tp / --pp whose product is {world_size}",
        )


def eos_ids(folder: Path | None) -> list[int]:
    """generation_config.json's eos_token_id, else config.json's (what HF generate() stops at)."""
    if folder is None:
        return []
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if value is not None:
                return [value] if isinstance(value, int) else list(value)
    return []


def tokenizer_of(folder: Path | None):
    if folder is None or not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _refuse_peft(megatron_path: str) -> None:
    """A PEFT run's checkpoint holds adapters only (read from its saved run config as plain YAML: the
    inference layer does not import bridge.config)."""
    folder, _ = resolve_checkpoint(megatron_path)
    path = Path(folder) / RUN_CONFIG_FILENAME
    if path.is_file() and ((yaml.safe_load(path.read_text()) or {}).get("peft") or {}).get("scheme"):
        raise config_error(
            "--megatron-path",
            megatron_path,
            "this checkpoint holds PEFT adapters only (its run trained adapters on frozen weights)",
            "merge them first: scripts/conversion/convert_checkpoint.py export --megatron-path "
            f"{megatron_path} --hf-path MERGED, then pass --hf-path MERGED",
        )


def load_model(
    *,
    hf_path: str | None = None,
    megatron_path: str | None = None,
    hf_config: str | None = None,
    tp: int = 1,
    pp: int = 1,
) -> LoadedModel:
    """Build the model on this rank (every rank of the replica calls it; process groups come up here)."""
    from bridge.conversion.auto_bridge import AutoBridge

    if (hf_path is None) == (megatron_path is None):
        raise config_error(
            "--hf-path / --megatron-path",
            "both given" if hf_path else "neither given",
            "exactly one model source is needed",
            "pass --hf-path HF_DIR (a Hugging Face folder) or --megatron-path CKPT_DIR (a bridge checkpoint)",
        )
    if hf_path is not None:
        bridge = AutoBridge.from_hf_pretrained(hf_path)
        provider = bridge.to_megatron_provider(load_weights=True)
    else:
        refuse_fsdp2_checkpoint(resolve_checkpoint(megatron_path)[0], reader="generation")
        _refuse_peft(megatron_path)
        bridge = (
            AutoBridge.from_hf_pretrained(hf_config)
            if hf_config is not None
            else AutoBridge.from_megatron_checkpoint(megatron_path)
        )
        provider = bridge.to_megatron_provider(load_weights=False)
    provider.tensor_model_parallel_size = tp
    provider.pipeline_model_parallel_size = pp
    provider.sequence_parallel = False  # batches of any length (engine.py)
    # Multi-token-prediction layers are a training aid: generation reads the LM head only (and
    # megatron-core 0.16.1's MTP forward needs labels). Their checkpoint tensors are listed as left out.
    provider.mtp_num_layers = None
    if megatron_path is None:
        chunks = provider.provide_distributed_model(wrap_with_ddp=False, mixed_precision_wrapper=False)
    else:
        from bridge.checkpoint import load_checkpoint

        chunks = provider.provide_distributed_model(
            wrap_with_ddp=False, mixed_precision_wrapper=False, random_init=False
        )
        load_checkpoint(megatron_path, chunks, load_rng=False, strict=True)
    folder = bridge.hf_path
    return LoadedModel(
        chunks=chunks,
        provider=provider,
        folder=folder,
        tokenizer=tokenizer_of(folder),
        eos_token_ids=eos_ids(folder),
        name=str(hf_path if hf_path is not None else megatron_path),
    )
