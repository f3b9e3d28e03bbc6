"""Dry runs of finetuning recipes before their inputs exist.

A finetuning recipe names no data files, tokenizer or starting checkpoint (they are the user's); its dry
run still plans the layout, batches, schedule and memory by standing mock data and a NullTokenizer in for
what is missing, and says, as warnings, what the run still needs. A run never uses the stand-ins: it
refuses until the inputs are given (bridge.config validation, bridge.config.finetune_rules).
"""

from __future__ import annotations

import atexit
import copy
import os
import shutil
import tempfile

from bridge.config.container import ConfigContainer
from bridge.config.finetune_rules import SFT_KINDS

FINETUNE_DATA_KINDS = (*SFT_KINDS, "preference", "vlm")  # what a finetuning recipe reads from files


def _empty_checkpoint() -> str:
    """An empty torch_dist-shaped folder (tracker at iteration 0), removed at exit: what a PEFT plan names
    as its frozen weights until the user gives them (planning reads the tracker, never weights)."""
    path = tempfile.mkdtemp(prefix="pending_pretrained_checkpoint_")
    with open(os.path.join(path, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("0")
    atexit.register(shutil.rmtree, path, True)
    return path


def missing_inputs(cfg: ConfigContainer, finetuning: bool = True) -> list[str]:
    """What a run of `cfg` still needs, one line each (empty when nothing is missing): a finetuning run its
    data, tokenizer and starting weights; a pretraining run on generated image-text data (mock_vlm) the
    model's processor."""
    needed = []
    if cfg.dataset.kind in FINETUNE_DATA_KINDS and not cfg.dataset.data_paths:
        files = (
            "image-text .jsonl files; docs/vlm.md"
            if cfg.dataset.kind == "vlm"
            else ".jsonl / .json / .parquet; docs/finetuning.md"
        )
        needed.append(
            f"dataset.data_paths: the run needs {cfg.dataset.kind} data files ({files}); this plan stands "
            "mock data in for them"
        )
    t = cfg.tokenizer
    if t.tokenizer_type == "HuggingFaceTokenizer" and not t.tokenizer_model:
        if not cfg.checkpoint.pretrained_checkpoint:  # a Hugging Face start brings its tokenizer
            needed.append(
                "tokenizer.tokenizer_model: the run needs a Hugging Face tokenizer folder (or a Hugging Face "
                "checkpoint.pretrained_checkpoint, whose tokenizer it takes); this plan stands a NullTokenizer in"
                + (" and mock token data" if cfg.dataset.kind == "mock_vlm" else "")
            )
    if not finetuning:
        return needed
    if cfg.distill.enabled and not cfg.distill.teacher:
        needed.append(
            "distill.teacher: the run needs the teacher's Hugging Face folder (the student's tokenizer); this "
            "plan leaves the teacher out"
        )
    c = cfg.checkpoint
    if not (c.pretrained_checkpoint or c.load):
        needed.append(
            "checkpoint.pretrained_checkpoint: the run starts from trained weights (a Hugging Face folder or a "
            "torch_dist checkpoint)"
        )
    return needed


def with_stand_ins(cfg: ConfigContainer) -> ConfigContainer:
    """A copy of `cfg` whose missing data and tokenizer are mock data and a NullTokenizer, and whose missing
    PEFT starting checkpoint is an empty stand-in folder (for planning only)."""
    cfg = copy.deepcopy(cfg)
    if cfg.distill.enabled and not cfg.distill.teacher:
        cfg.distill.enabled = False
    t = cfg.tokenizer
    no_processor = t.tokenizer_type == "HuggingFaceTokenizer" and not t.tokenizer_model
    if (cfg.dataset.kind in FINETUNE_DATA_KINDS and not cfg.dataset.data_paths) or (
        cfg.dataset.kind == "mock_vlm" and no_processor and not cfg.checkpoint.pretrained_checkpoint
    ):
        cfg.dataset.kind = "mock"
        cfg.dataset.packed_sequence_size = 0
        cfg.dataset.pad_seq_to_mult = None
    c = cfg.checkpoint
    if cfg.peft.scheme is not None and not (c.pretrained_checkpoint or c.load):
        c.pretrained_checkpoint = _empty_checkpoint()  # adapters need frozen weights: named, never read
    if t.tokenizer_type == "HuggingFaceTokenizer" and not t.tokenizer_model and cfg.dataset.kind == "mock":
        t.tokenizer_type, t.tokenizer_model, t.vocab_size = "NullTokenizer", None, None
    return cfg
