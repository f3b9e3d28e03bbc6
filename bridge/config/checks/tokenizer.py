"""The `tokenizer` section: the tokenizer type and its vocabulary against the model's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.config import sections as S
from bridge.config.checks.rules import one_of, positive
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer


def check_tokenizer(cfg: ConfigContainer) -> None:
    t = cfg.tokenizer
    one_of("tokenizer.tokenizer_type", t.tokenizer_type, S.TOKENIZER_TYPES)
    if t.tokenizer_type == "HuggingFaceTokenizer":
        if not t.tokenizer_model:
            raise config_error(
                "tokenizer.tokenizer_model",
                t.tokenizer_model,
                "HuggingFaceTokenizer needs a tokenizer",
                "give a local tokenizer directory (or hub name if the cache has it)",
            )
        if t.vocab_size is not None:
            raise config_error(
                "tokenizer.vocab_size",
                t.vocab_size,
                "is only for NullTokenizer (a HF tokenizer knows its size)",
                "remove it (tokenizer.vocab_size=null)",
            )
        return
    if cfg.model.vocab_size is None:
        raise config_error(
            "model.vocab_size",
            None,
            "the NullTokenizer needs a vocabulary size",
            "set model.vocab_size (or tokenizer.vocab_size; each follows the other)",
        )
    positive("tokenizer.vocab_size", t.vocab_size)
    if t.vocab_size + 1 > cfg.model.vocab_size:
        raise config_error(
            "tokenizer.vocab_size",
            t.vocab_size,
            f"the NullTokenizer emits ids up to vocab_size (its EOD id), which must fit model.vocab_size = "
            f"{cfg.model.vocab_size}",
            f"use at most {cfg.model.vocab_size - 1}, or null to follow the model",
        )
