"""The fields of a run's config whose None means "follow another field", filled in one place.

The plan (bridge.config.run_plan.build_plan) resolves before it checks, so the training loop reads one
consistent value; a config stays plain data.
"""

from __future__ import annotations

from bridge.checkpoint.paths import is_hf_folder
from bridge.config.container import ConfigContainer
from bridge.errors import ConfigError


def resolve_config(cfg: ConfigContainer) -> ConfigContainer:
    """Fill the fields whose None means "follow another field"; raise if an explicit one disagrees.

    build_plan calls it before any check. Idempotent.
    """
    model_seq = cfg.model.seq_length
    if cfg.dataset.seq_length is None:
        cfg.dataset.seq_length = model_seq
    elif cfg.dataset.seq_length != model_seq:
        raise ConfigError(
            f"dataset.seq_length={cfg.dataset.seq_length} differs from model.seq_length={model_seq}: "
            "the data and the model must use one sequence length. Set model.seq_length only "
            "(dataset.seq_length=null follows it), or set both to the same value."
        )
    if (
        cfg.tokenizer.tokenizer_type == "HuggingFaceTokenizer"
        and cfg.tokenizer.tokenizer_model is None
        and cfg.checkpoint.pretrained_checkpoint
    ):
        if is_hf_folder(cfg.checkpoint.pretrained_checkpoint):  # None follows the Hugging Face start
            cfg.tokenizer.tokenizer_model = cfg.checkpoint.pretrained_checkpoint
    if cfg.tokenizer.tokenizer_type == "NullTokenizer":
        # Megatron-Core's NullTokenizer adds an EOD id equal to vocab_size: model vocab = vocab_size + 1.
        if cfg.tokenizer.vocab_size is None and cfg.model.vocab_size is not None:
            cfg.tokenizer.vocab_size = cfg.model.vocab_size - 1
        elif cfg.model.vocab_size is None and cfg.tokenizer.vocab_size is not None:
            cfg.model.vocab_size = cfg.tokenizer.vocab_size + 1
    return cfg
