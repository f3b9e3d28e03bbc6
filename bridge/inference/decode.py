"""Batched decoding of several prompts on an Engine (the driver's side), one token per row per step.

Each step runs every unfinished row in full (no KV cache): rows of different lengths batch together
right-padded (engine.py: attention is causal, so padding never reaches a row's own positions), and a row
may join or leave between steps, which is what lets the server batch requests as they arrive
(continuous batching). The cost is a quadratic recompute, acceptable on the small models this runs on
CPU; bridge.inference.generate keeps the KV-cached single-prompt path.

A row's token choice is bridge.inference.generate's `sample_token` (greedy at temperature 0, else
top-k / top-p with the row's own seeded CPU generator), so a greedy row equals `generate()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from bridge.inference.engine import Engine
from bridge.inference.generate import check_request, sample_token


@dataclass
class Row:
    """One prompt being continued. `stop(new_ids)` -> True ends the row (e.g. a stop string appeared)."""

    prompt: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    eos_token_ids: frozenset[int] = frozenset()
    stop: Callable[[list[int]], bool] | None = None
    new: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" (EOS or a stop check) or "length"
    _generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if self.temperature > 0:
            seed = self.seed if self.seed is not None else int(torch.randint(0, 2**62, (1,)))
            self._generator = torch.Generator().manual_seed(int(seed))

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.new

    def check(self, vocab_size: int, max_length: int | None) -> None:
        check_request(
            self.prompt, self.max_new_tokens, vocab_size, max_length, self.temperature, self.top_k, self.top_p
        )

    def push(self, logits: torch.Tensor) -> int:
        """Choose the next token from this row's [vocab] logits; sets finish_reason when the row ends."""
        token = sample_token(logits, self.temperature, self.top_k, self.top_p, self._generator)
        self.new.append(token)
        if token in self.eos_token_ids or (self.stop is not None and self.stop(self.new)):
            self.finish_reason = "stop"
        elif len(self.new) >= self.max_new_tokens:
            self.finish_reason = "length"
        return token


def step(engine: Engine, rows: Sequence[Row]) -> list[int]:
    """One forward of the unfinished `rows` together; each gets its next token (returned in order)."""
    logits = engine.last_logits([r.ids for r in rows])
    return [r.push(logits[i]) for i, r in enumerate(rows)]


def decode(engine: Engine, rows: Sequence[Row], max_batch_size: int = 16) -> list[Row]:
    """Run `rows` to the end, at most `max_batch_size` at a time (later rows join as earlier ones finish)."""
    for r in rows:
        r.check(engine.vocab_size, engine.max_length)
    waiting = list(rows)
    active: list[Row] = []
    while waiting or active:
        while waiting and len(active) < max_batch_size:
            active.append(waiting.pop(0))
        step(engine, active)
        active = [r for r in active if r.finish_reason is None]
    return list(rows)
