"""Greedy and sampled generation on Megatron-Core GPTModel chunks built by bridge (any TP / PP layout).

One prompt (batch 1). Every step is one forward through Megatron-Core's pipeline schedule
(`get_forward_backward_func()` with `forward_only=True`, one micro batch): with PP the schedule sends
the hidden states between stages; with PP=1 it is the no-pipelining schedule, the same code path.

Two ways of running the steps:

- `kv_cache=True` (default): Megatron-Core's static-batching inference path. A
  `megatron.core.inference.contexts.StaticInferenceContext` holds each layer's keys and values: the
  first step runs the whole prompt (prefill), every later step only the newest token at its position,
  attending to the cached keys. On 0.19 the model is run inside `InferenceMode.active()` (that release
  reads the flag); 0.16 has no flag and keys off the context alone. Each pipeline stage caches its own
  layers, each TP rank its own heads.
- `kv_cache=False`: an honest full recompute: every step runs the whole sequence so far, no cache.

Logits: the output layer is column (vocab) parallel; `runtime_gather_output=True` makes GPTModel gather
them over the TP group (`gather_from_tensor_model_parallel_region`; Megatron-Core's inference path
requires it), and the padded vocabulary rows (the embedding is padded to a multiple of
make_vocab_size_divisible_by * tp) are cut off before argmax / sampling, so a padding row is never
chosen. Only the last pipeline stage has logits: it picks the token, then the token is broadcast over
the pipeline group from the last stage and over the TP group from TP rank 0, so every rank of the
model feeds the same token into the next step.

Sampling (temperature > 0): logits / temperature, then top-k, then top-p (nucleus) filtering, then a
draw from a CPU `torch.Generator` seeded with `seed` on every rank (seed=None: rank 0 draws one and
broadcasts it). temperature == 0 is greedy (argmax; top_k / top_p unused).

Images (a vision-language model, bridge.models.vlm_model): `images` are the processor's image tensors
(pixel_values, image_sizes, ...) of the prompt, whose placeholder tokens they fill. They go with every
forward that holds the prompt: the prefill with the cache (later steps feed only new tokens, which hold
no placeholder and attend to the cached keys), every step without it. A model whose RoPE positions
depend on the images (M-RoPE, Qwen2.5-VL) gets them computed once from the prompt and its images, and the
generated tokens' positions continue after them (`_PromptPositions`), with or without the cache.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bridge.errors import config_error
from bridge.parallel.wrappers import unwrap_all


@dataclass(frozen=True)
class GenerationResult:
    ids: list[int]  # the generated ids only (the prompt not repeated); ends with the EOS id if one stopped it
    tokens_per_s: float  # len(ids) / wall time from the first forward (prefill included) to the last token


# ---- filtering and sampling (pure torch, one logits row) ----------------------------------------


def top_k_mask(logits: torch.Tensor, k: int) -> torch.Tensor:
    """True for the k largest logits of the last dimension (k <= 0 or k >= vocab: all True).
    Ties at the k-th value keep every tied entry, so the result does not depend on sort order."""
    if k <= 0 or k >= logits.size(-1):
        return torch.ones_like(logits, dtype=torch.bool)
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits >= kth


def top_p_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """True for the smallest set of most likely tokens whose probabilities reach `p` (nucleus).

    A token is kept when the probability mass of the tokens ranked strictly above it is below p, so the
    most likely token is always kept and the kept mass is the first cumulative sum >= p. p >= 1: all.
    """
    if p >= 1.0:
        return torch.ones_like(logits, dtype=torch.bool)
    probs = torch.softmax(logits.float(), dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_above = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    keep_sorted = mass_above < p
    keep_sorted[..., 0] = True  # rounding can never drop the top token
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """`logits` with the tokens top-k and then top-p remove set to -inf (top-p on the top-k survivors)."""
    out = logits.masked_fill(~top_k_mask(logits, top_k), float("-inf"))
    return out.masked_fill(~top_p_mask(out, top_p), float("-inf"))


def sample_token(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> int:
    """One token id from a [vocab] logits row: argmax when temperature == 0, else a draw."""
    if temperature == 0.0:
        return int(torch.argmax(logits, dim=-1))
    scaled = filter_logits(logits.float() / temperature, top_k, top_p)
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


# ---- checks ----------------------------------------------------------------------------------------


def check_request(
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    vocab_size: int,
    max_sequence_length: int | None,
    temperature: float,
    top_k: int,
    top_p: float,
) -> None:
    """Every rule of a generation request, as ConfigError (name, value, rule, fix)."""
    if len(prompt_ids) == 0:
        raise config_error("prompt_ids", [], "the prompt needs at least one token", "pass a non-empty prompt")
    bad = [i for i in prompt_ids if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < vocab_size]
    if bad:
        raise config_error(
            "prompt_ids",
            bad[:5],
            f"every id must be an integer in [0, {vocab_size}) (the model's vocab_size is {vocab_size})",
            "drop or replace those ids",
        )
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise config_error(
            "max_new_tokens", max_new_tokens, "must be an integer >= 1", "ask for at least one token"
        )
    total = len(prompt_ids) + max_new_tokens
    if max_sequence_length is not None and total > max_sequence_length:
        raise config_error(
            "max_new_tokens",
            max_new_tokens,
            f"the prompt ({len(prompt_ids)} tokens) plus the new tokens ({total}) exceed the model's "
            f"max sequence length {max_sequence_length} (max_position_embeddings)",
            f"ask for at most {max_sequence_length - len(prompt_ids)} new tokens or shorten the prompt",
        )
    if not temperature >= 0.0:
        raise config_error(
            "temperature", temperature, "must be >= 0 (0 = greedy)", "pass 0 or a positive value"
        )
    if not isinstance(top_k, int) or top_k < 0:
        raise config_error(
            "top_k", top_k, "must be an integer >= 0 (0 = off)", "pass 0 or a positive integer"
        )
    if not 0.0 < top_p <= 1.0:
        raise config_error("top_p", top_p, "must be in (0, 1] (1 = off)", "pass a value such as 0.9, or 1.0")


def _check_chunks(chunks: list) -> None:
    from megatron.core import parallel_state

    if len(chunks) != 1:
        raise config_error(
            "model_chunks",
            f"{len(chunks)} chunks",
            "generation runs one model chunk per rank (virtual pipeline stages are not supported)",
            "build the model without virtual_pipeline_model_parallel_size",
        )
    config = chunks[0].config
    if config.sequence_parallel and parallel_state.get_tensor_model_parallel_world_size() > 1:
        raise config_error(
            "sequence_parallel",
            True,
            "a decoding step holds one token, which cannot be split over the TP ranks",
            "build the model with sequence_parallel=False for generation",
        )
    if parallel_state.get_context_parallel_world_size() > 1:
        raise config_error(
            "context_parallel_size",
            parallel_state.get_context_parallel_world_size(),
            "generation runs without context parallelism",
            "build the model with context_parallel_size=1",
        )


# ---- the forward and the token exchange -----------------------------------------------------------


def _device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )


def _inference_mode():
    """Megatron-Core 0.19's process-wide inference flag (GPTModel reads it); 0.16 has none."""
    try:
        from megatron.core.inference.utils import InferenceMode
    except ImportError:
        return contextlib.nullcontext()
    return InferenceMode.active() if hasattr(InferenceMode, "active") else contextlib.nullcontext()


def _last_logits(
    chunks: list, tokens: torch.Tensor, positions: torch.Tensor, context, images: dict | None = None
) -> torch.Tensor | None:
    """[padded vocab] logits of the last position on the last pipeline stage; None on the others."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    def forward_step(data_iterator: Iterable, model):
        toks, pos = next(data_iterator)
        kwargs = {"inference_context": context} if context is not None else {}
        if images:  # the prompt's images (a vision-language model merges them on its first stage)
            kwargs["images"] = images
        out = model(toks, pos, attention_mask=None, runtime_gather_output=True, **kwargs)
        return out, None  # no loss function: the schedule hands the last stage's output back

    outputs = get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter([(tokens, positions)]),
        model=chunks,
        num_microbatches=1,
        seq_length=tokens.size(1),
        micro_batch_size=1,
        decoder_seq_length=tokens.size(1),
        forward_only=True,
    )
    if not outputs:
        return None
    return outputs[0][0, -1]  # [b, s, v] (s = 1 when the context keeps only the last token's logits)


def _share_token(token: int, device: torch.device) -> int:
    """The last stage's choice on every rank: pipeline group from its last stage, then TP group from TP rank 0."""
    from megatron.core import parallel_state

    value = torch.tensor([token], dtype=torch.long, device=device)
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        dist.broadcast(
            value,
            src=parallel_state.get_pipeline_model_parallel_last_rank(),
            group=parallel_state.get_pipeline_model_parallel_group(),
        )
    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        dist.broadcast(
            value,
            src=parallel_state.get_tensor_model_parallel_src_rank(),
            group=parallel_state.get_tensor_model_parallel_group(),
        )
    return int(value.item())


def _shared_seed(seed: int | None, device: torch.device) -> int:
    """`seed`, or (None) one drawn on rank 0 and broadcast, so every rank's generator starts the same."""
    if seed is not None:
        return int(seed)

    value = torch.tensor([random.SystemRandom().randrange(2**63)], dtype=torch.long, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast(value, src=0)
    return int(value.item())


def _eos_set(eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset([eos_token_id])
    return frozenset(int(i) for i in eos_token_id)


@dataclass(frozen=True)
class _PromptPositions:
    """M-RoPE position ids ([3, b, s]: temporal, height, width) of a model that computes them from the
    tokens and images (its `positions`, e.g. Qwen2.5-VL's get_rope_index). They are computed once, over
    the prompt and its images; a generated token is text, whose three ids are equal and continue after
    the prompt's largest one: token i (i >= len(prompt)) is at i + delta, delta = max + 1 - len(prompt)
    (transformers' `rope_deltas`). So a cached decoding step, which holds only the new token, gets the
    position a full recompute gives it."""

    prompt: torch.Tensor  # [3, 1, len(prompt)]
    delta: int

    @staticmethod
    def of(model, prompt: list[int], images: dict | None, device: torch.device) -> _PromptPositions | None:
        positions = getattr(model, "positions", None)
        if positions is None:
            return None
        ids = torch.tensor([prompt], dtype=torch.long, device=device)
        first = positions(ids, images or {})
        return _PromptPositions(first, int(first.max()) + 1 - len(prompt))

    def between(self, start: int, end: int) -> torch.Tensor:
        """The [3, 1, end - start] position ids of the sequence's tokens start .. end - 1."""
        n = self.prompt.shape[-1]
        parts = [self.prompt[..., start:end]] if start < n else []
        if end > n:
            later = torch.arange(max(start, n), end, device=self.prompt.device) + self.delta
            parts.append(later.view(1, 1, -1).expand(3, 1, -1))
        return torch.cat(parts, dim=-1)


# ---- generation ---------------------------------------------------------------------------------------


def generate(
    model_chunks: list,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    *,
    vocab_size: int,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    kv_cache: bool = True,
    images: dict[str, torch.Tensor] | None = None,
) -> GenerationResult:
    """Continue `prompt_ids` by up to `max_new_tokens` tokens; every rank of the model calls it.

    `model_chunks`: this rank's chunks from provider.provide_distributed_model() (wrappers allowed).
    `vocab_size`: the real (unpadded) vocabulary, e.g. provider.vocab_size. Stops after a token in
    `eos_token_id` (an id or a list of ids), which is included in the result. The chunks are put in
    eval mode for the call and restored afterwards. Every rank returns the same ids. `images`: the
    prompt's image tensors for a vision-language model (its processor's pixel_values, ...).
    """
    chunks = list(model_chunks) if isinstance(model_chunks, (list, tuple)) else [model_chunks]
    _check_chunks(unwrap_all(chunks))
    max_len = getattr(unwrap_all(chunks)[0], "max_sequence_length", None)
    prompt = list(prompt_ids)
    check_request(prompt, max_new_tokens, vocab_size, max_len, temperature, top_k, top_p)
    device = _device()
    generator = torch.Generator().manual_seed(_shared_seed(seed, device)) if temperature > 0 else None
    stop = _eos_set(eos_token_id)
    rope = _PromptPositions.of(unwrap_all(chunks)[0], prompt, images, device)

    context = None
    if kv_cache:
        from megatron.core.inference.contexts import StaticInferenceContext

        context = StaticInferenceContext(1, len(prompt) + max_new_tokens)

    was_training = [c.training for c in chunks]
    for c in chunks:
        c.eval()
    ids = list(prompt)
    new: list[int] = []
    start = time.perf_counter()
    try:
        with torch.no_grad(), _inference_mode():
            while len(new) < max_new_tokens:
                # with the cache, only the tokens the cache has not seen yet (all of the prompt at first)
                first = context.sequence_len_offset if context is not None else 0
                tokens = torch.tensor([ids[first:]], dtype=torch.long, device=device)
                if rope is not None:
                    # M-RoPE: the [3, 1, s] ids of the whole sequence, also for a cached step of one token:
                    # Megatron-Core's static KV cache rotates the cached keys with the table's rows
                    # [:end] and the new queries with rows [start:end], rows indexed by sequence place
                    positions = rope.between(0, len(ids))
                else:
                    positions = torch.arange(first, len(ids), dtype=torch.long, device=device).unsqueeze(0)
                # the images go with the forwards that hold the prompt's placeholders
                step_images = images if first == 0 else None
                logits = _last_logits(chunks, tokens, positions, context, step_images)
                if context is not None:
                    context.sequence_len_offset += tokens.size(1)
                token = -1
                if logits is not None:
                    token = sample_token(logits[:vocab_size], temperature, top_k, top_p, generator)
                token = _share_token(token, device)
                ids.append(token)
                new.append(token)
                if token in stop:
                    break
    finally:
        for c, training in zip(chunks, was_training, strict=True):
            c.train(training)
    elapsed = time.perf_counter() - start
    return GenerationResult(ids=new, tokens_per_s=len(new) / elapsed if elapsed > 0 else float("inf"))
