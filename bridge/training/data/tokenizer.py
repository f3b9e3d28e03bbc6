"""The small tokenizer surface the datasets need: vocab_size, eod, pad and unique_identifiers.

Megatron-Core's datasets only read these attributes (and hash `unique_identifiers` into their cache
names), so two thin adapters are enough: a null tokenizer for token-id data and a Hugging Face one.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

from bridge.config.sections import TokenizerConfig
from bridge.errors import ConfigError


@dataclass
class NullTokenizer:
    """Megatron-Core's meaning: ids 0..num_ids-1 plus an end-of-document id equal to num_ids."""

    num_ids: int

    @property
    def vocab_size(self) -> int:
        return self.num_ids + 1

    @property
    def eod(self) -> int:
        return self.num_ids

    eos = eod

    @property
    def pad(self) -> int:
        return -1  # never produced, so nothing is masked as padding

    @property
    def unique_identifiers(self) -> OrderedDict:
        return OrderedDict(cls="NullTokenizer", vocab_size=self.num_ids)

    def tokenize(self, text: str) -> list[int]:
        try:
            return [int(x) for x in text.split()]
        except ValueError:
            word = next(x for x in text.split() if not x.lstrip("-").isdigit())
            raise ValueError(
                f"the NullTokenizer reads whitespace-separated token ids, and {word[:40]!r} is not one; for text "
                "use tokenizer.tokenizer_type=HuggingFaceTokenizer with tokenizer.tokenizer_model=<path>"
            ) from None


class HFTokenizer:
    """A Hugging Face tokenizer loaded from a local path (no hub access at run time)."""

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        self.path = str(path)
        try:
            self._tok = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        except (OSError, ValueError) as err:  # transformers' messages for a missing path mislead
            why = (
                "does not exist (a local tokenizer directory, or a hub name already in the Hugging Face "
                "cache: nothing is downloaded at run time)"
                if not os.path.exists(self.path)
                else f"cannot be loaded as a tokenizer ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
            )
            raise ConfigError(f"tokenizer.tokenizer_model={self.path!r} {why}") from None
        eod = self._tok.eos_token_id
        if eod is None:
            raise ConfigError(
                f"tokenizer.tokenizer_model={self.path!r}: the tokenizer has no eos token, which marks "
                "document ends in the training data; use a tokenizer with an eos_token"
            )
        self._eod = int(eod)
        pad = self._tok.pad_token_id
        self._pad = -1 if pad is None or pad == self._eod else int(pad)

    @property
    def vocab_size(self) -> int:
        return len(self._tok)

    @property
    def eod(self) -> int:
        return self._eod

    eos = eod

    @property
    def pad(self) -> int:
        return self._pad

    @property
    def unique_identifiers(self) -> OrderedDict:
        return OrderedDict(cls="HFTokenizer", path=self.path, vocab_size=self.vocab_size)

    def tokenize(self, text: str) -> list[int]:
        return self._tok(text, add_special_tokens=False)["input_ids"]

    def tokenize_batch(self, texts: list[str]) -> list[list[int]]:
        """tokenize() of each text in one batched call (the fast tokenizers run it in Rust)."""
        return self._tok(list(texts), add_special_tokens=False)["input_ids"] if texts else []

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self._tok, "chat_template", None))

    def apply_chat_template(
        self, conversations: list[list[dict]], add_generation_prompt: bool = False
    ) -> list[list[int]]:
        """Token ids of each conversation rendered with the chat template (one batched call)."""
        if not conversations:
            return []
        out = self._tok.apply_chat_template(
            conversations, tokenize=True, add_generation_prompt=add_generation_prompt, return_dict=False
        )
        if not isinstance(out, list):  # a BatchEncoding where return_dict is not honoured
            out = out["input_ids"]
        return [list(ids) for ids in out]


def build_tokenizer(tokenizer_cfg: TokenizerConfig, model_vocab_size: int) -> NullTokenizer | HFTokenizer:
    """Build the (validated) `tokenizer` section's tokenizer; its ids must fit the model's vocabulary."""
    if tokenizer_cfg.tokenizer_type == "NullTokenizer":
        # None follows the model: model_vocab_size - 1 ids plus eod fill the embedding exactly.
        vocab = tokenizer_cfg.vocab_size or model_vocab_size - 1
        tok: NullTokenizer | HFTokenizer = NullTokenizer(int(vocab))
    else:  # HuggingFaceTokenizer, with tokenizer_model set (validation)
        tok = HFTokenizer(tokenizer_cfg.tokenizer_model)
    if tok.vocab_size > model_vocab_size:
        raise ConfigError(
            f"tokenizer vocabulary ({tok.vocab_size} ids) is larger than model.vocab_size={model_vocab_size}: "
            f"token ids would not fit the embedding; set model.vocab_size={tok.vocab_size} or larger"
        )
    return tok
