"""Batched forwards of one model replica (any TP / PP), driven by one rank: what evaluation and serving run on.

One rank of the replica, the *driver* (the model-parallel group's first rank: TP rank 0 of the first
pipeline stage), decides what to compute; every other rank of the replica sits in `serve_forever()` and
runs the same forward when the driver broadcasts a batch. So a caller that is not collective (an lm-eval
run, an HTTP server) lives on the driver only.

A batch is right-padded rows of token ids. No attention mask is needed: attention is causal, so the
padding after a row's last token never reaches that row's positions, and only positions < length are read.
Each command is: a header [command, batch, seq] then the tokens, the lengths (and for scoring the targets),
broadcast over the model-parallel group from the driver; the forward runs through Megatron-Core's pipeline
schedule (one micro batch of the whole batch); the last stage reduces the logits to what the command asks,
and broadcasts that over the pipeline group to the driver (every TP rank of the last stage holds the
gathered logits, `runtime_gather_output=True`). Padded vocabulary rows are cut off before anything reads
the logits. Sequence parallelism (a training layout) is fine: rows are padded to a multiple of TP.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bridge.errors import config_error
from bridge.parallel.wrappers import unwrap_all

_STOP, _LAST_LOGITS, _SCORE = 0, 1, 2


@dataclass(frozen=True)
class Scores:
    """Per position of each row (position t scores the target at t, i.e. the token that follows input t)."""

    logprobs: torch.Tensor  # [b, s] float32: log p(target[t] | input[: t + 1])
    greedy: torch.Tensor  # [b, s] bool: target[t] is the argmax at t


def _device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Engine:
    """This rank's chunks of one model replica. `vocab_size` is the real (unpadded) vocabulary.

    On the driver, `last_logits` / `score` run a batch on the whole replica and return the result; on the
    other ranks call `serve_forever()`, which returns when the driver calls `stop()`. With one rank both
    are plain local calls."""

    def __init__(self, model_chunks: list | object, vocab_size: int) -> None:
        from megatron.core import parallel_state

        self.chunks = list(model_chunks) if isinstance(model_chunks, (list, tuple)) else [model_chunks]
        model = unwrap_all(self.chunks)
        if len(model) != 1:
            raise config_error(
                "model_chunks",
                f"{len(model)} chunks",
                "evaluation and serving run one model chunk per rank (no virtual pipeline stages)",
                "build the model without virtual_pipeline_model_parallel_size",
            )
        # sequence parallelism splits the sequence over the TP ranks: rows are padded to a multiple of TP
        # (right padding, never read: see the module's docstring)
        tp = parallel_state.get_tensor_model_parallel_world_size()
        self._seq_multiple = tp if model[0].config.sequence_parallel and tp > 1 else 1
        if parallel_state.get_context_parallel_world_size() > 1:
            raise config_error(
                "context_parallel_size",
                parallel_state.get_context_parallel_world_size(),
                "evaluation and serving run without context parallelism",
                "build the model with context_parallel_size=1",
            )
        self.vocab_size = int(vocab_size)
        self.max_length = int(getattr(model[0], "max_sequence_length", 0) or 0) or None
        self.device = _device()
        self._group = parallel_state.get_model_parallel_group()

        self._size = dist.get_world_size(self._group)
        self._driver = dist.get_global_rank(self._group, 0) if self._size > 1 else dist.get_rank()
        self.is_driver = dist.get_rank() == self._driver
        self._pp_size = parallel_state.get_pipeline_model_parallel_world_size()
        self._is_last = parallel_state.is_pipeline_last_stage()

    # ---- the driver's calls ----------------------------------------------------------------------

    def last_logits(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        """[b, vocab] float32 logits at each row's last token."""
        tokens, lengths = self._pad(rows)
        self._send(_LAST_LOGITS, tokens, lengths, None)
        return self._run(_LAST_LOGITS, tokens, lengths, None)

    def score(self, rows: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> Scores:
        """Log-probabilities and greedy flags of `targets[i][t]` after `rows[i][: t + 1]` (same lengths)."""
        tokens, lengths = self._pad(rows)
        target, _ = self._pad(targets)
        if target.shape != tokens.shape:
            raise ValueError("score: every targets row must be as long as its rows row")
        self._send(_SCORE, tokens, lengths, target)
        return self._run(_SCORE, tokens, lengths, target)

    def stop(self) -> None:
        """Releases the other ranks from serve_forever()."""
        if self._size > 1:
            self._broadcast(torch.tensor([_STOP, 0, 0], dtype=torch.long, device=self.device))

    # ---- the other ranks -------------------------------------------------------------------------

    def serve_forever(self) -> None:
        while True:
            header = self._broadcast(torch.zeros(3, dtype=torch.long, device=self.device))
            command, b, s = (int(v) for v in header.tolist())
            if command == _STOP:
                return
            tokens = self._broadcast(torch.zeros(b, s, dtype=torch.long, device=self.device))
            lengths = self._broadcast(torch.zeros(b, dtype=torch.long, device=self.device))
            target = None
            if command == _SCORE:
                target = self._broadcast(torch.zeros(b, s, dtype=torch.long, device=self.device))
            self._run(command, tokens, lengths, target)

    # ---- shared ------------------------------------------------------------------------------------

    def _pad(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        if not rows or any(len(r) == 0 for r in rows):
            raise ValueError("every row needs at least one token")
        s = max(len(r) for r in rows)
        s = -(-s // self._seq_multiple) * self._seq_multiple
        tokens = torch.zeros(len(rows), s, dtype=torch.long)
        for i, r in enumerate(rows):
            tokens[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        return tokens.to(self.device), lengths.to(self.device)

    def _broadcast(self, value: torch.Tensor) -> torch.Tensor:
        dist.broadcast(value, src=self._driver, group=self._group)
        return value

    def _send(self, command: int, tokens, lengths, target) -> None:
        if self._size == 1:
            return
        b, s = tokens.shape
        self._broadcast(torch.tensor([command, b, s], dtype=torch.long, device=self.device))
        self._broadcast(tokens)
        self._broadcast(lengths)
        if target is not None:
            self._broadcast(target)

    def _run(self, command: int, tokens: torch.Tensor, lengths: torch.Tensor, target):
        logits = self._forward(tokens)  # [b, s, vocab] on the last stage, None elsewhere
        b, s = tokens.shape
        if command == _LAST_LOGITS:
            out = torch.zeros(b, self.vocab_size, dtype=torch.float32, device=self.device)
            if logits is not None:
                out = logits[torch.arange(b, device=logits.device), lengths - 1].float().contiguous()
            return self._from_last_stage(out)
        scores = torch.zeros(2, b, s, dtype=torch.float32, device=self.device)
        if logits is not None:
            logp = torch.log_softmax(logits.float(), dim=-1)
            scores[0] = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            scores[1] = (logp.argmax(dim=-1) == target).float()
        scores = self._from_last_stage(scores)
        return Scores(logprobs=scores[0], greedy=scores[1].bool())

    def _from_last_stage(self, value: torch.Tensor) -> torch.Tensor:
        if self._pp_size > 1:
            from megatron.core import parallel_state

            dist.broadcast(
                value,
                src=parallel_state.get_pipeline_model_parallel_last_rank(),
                group=parallel_state.get_pipeline_model_parallel_group(),
            )
        return value

    def _forward(self, tokens: torch.Tensor) -> torch.Tensor | None:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        b, s = tokens.shape
        positions = torch.arange(s, dtype=torch.long, device=tokens.device).unsqueeze(0).expand(b, s)

        def forward_step(data_iterator: Iterable, model):
            toks, pos = next(data_iterator)
            return model(toks, pos, attention_mask=None, runtime_gather_output=True), None

        was_training = [c.training for c in self.chunks]
        for c in self.chunks:
            c.eval()
        try:
            with torch.no_grad():
                outputs = get_forward_backward_func()(
                    forward_step_func=forward_step,
                    data_iterator=iter([(tokens, positions)]),
                    model=self.chunks,
                    num_microbatches=1,
                    seq_length=s,
                    micro_batch_size=b,
                    decoder_seq_length=s,
                    forward_only=True,
                )
        finally:
            for c, training in zip(self.chunks, was_training, strict=True):
                c.train(training)
        if not self._is_last or not outputs:
            return None
        return outputs[0][..., : self.vocab_size]
