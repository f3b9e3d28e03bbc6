"""lm-eval's model backend `bridge`: log-likelihoods and generation of a bridge model at any TP / PP.

`lm_eval.simple_evaluate(model="bridge", model_args="hf_path=DIR")` (one process) or `bridge eval` (any
layout, under torchrun) or `BridgeLM(engine, tokenizer)` over a model already built (training's
benchmarks). The requests follow lm-eval's `hf` backend so the two give the same numbers on the same
model: lm-eval's TemplateLM splits (context, continuation) pairs into tokens, inputs are the last
`max_length + 1` tokens minus the last, a continuation's log-likelihood is the sum of its tokens'
log-softmax, `is_greedy` is every continuation token being the argmax; rolling log-likelihoods use
lm-eval's own disjoint windows; generation stops at `until` strings and the EOS text and is cut at the
first one, with lm-eval's own helpers.

The computation is collective (engine.py): this object lives on the replica's driver rank, which calls
lm-eval; the other ranks serve forwards. lm-eval sees one process (`rank` 0, `world_size` 1): the model
replica is split by TP / PP, not the requests.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from lm_eval.tasks import TaskManager
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from bridge.errors import config_error
from bridge.inference.decode import Row, decode
from bridge.inference.engine import Engine
from bridge.inference.loading import check_layout, load_model
from bridge.parallel.ranks import env_world_size

_DEFAULT_BATCH = 8
_DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's hf backend default


@register_model("bridge")
class BridgeLM(TemplateLM):
    def __init__(
        self,
        engine: Engine | None = None,
        tokenizer: Any = None,
        *,
        hf_path: str | None = None,
        megatron_path: str | None = None,
        hf_config: str | None = None,
        tp: int = 1,
        pp: int = 1,
        batch_size: int | str = _DEFAULT_BATCH,
        max_length: int | None = None,
        max_gen_toks: int = _DEFAULT_MAX_GEN_TOKS,
        add_bos_token: bool | None = None,
        eos_token_ids: list[int] | None = None,
        **_ignored: Any,  # lm-eval passes device / max_batch_size, which the layout decides here
    ) -> None:
        super().__init__()
        if engine is None:  # simple_evaluate(model="bridge", model_args=...): one process builds the model
            check_layout(int(tp), int(pp), env_world_size(), "the lm-eval backend built from model_args")
            loaded = load_model(
                hf_path=hf_path, megatron_path=megatron_path, hf_config=hf_config, tp=int(tp), pp=int(pp)
            )
            engine = Engine(loaded.chunks, loaded.provider.vocab_size)
            tokenizer = loaded.tokenizer
            eos_token_ids = loaded.eos_token_ids
        if tokenizer is None:
            raise config_error(
                "tokenizer",
                None,
                "lm-eval tasks are text, and the model's folder has no tokenizer files",
                "point hf_path (or hf_config) at a folder with the tokenizer",
            )
        self.engine = engine
        self.tokenizer = tokenizer
        self.batch_size = (
            _DEFAULT_BATCH if batch_size in (None, "auto") else int(str(batch_size).split(":")[0])
        )
        self._max_length = int(max_length) if max_length else engine.max_length
        self._max_gen_toks = int(max_gen_toks)
        self.add_bos_token = add_bos_token
        self._eos_ids = frozenset(eos_token_ids or ([] if self.eot_token_id is None else [self.eot_token_id]))

    # ---- what TemplateLM asks for ------------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        if add_special_tokens is None and self.add_bos_token is not None:
            add_special_tokens = self.add_bos_token
        kw = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return list(self.tokenizer.encode(string, **kw))

    def tok_decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    # ---- scoring ---------------------------------------------------------------------------------------

    def _loglikelihood_tokens(
        self, requests, disable_tqdm: bool = False, **kwargs
    ) -> list[tuple[float, bool]]:
        # longest first, so a batch holds similar lengths (as lm-eval's hf backend batches)
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i][1] + requests[i][2]))
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            rows, targets, n_cont = [], [], []
            for i in batch:
                _, context, continuation = requests[i]
                whole = (list(context) + list(continuation))[-(self.max_length + 1) :]
                rows.append(whole[:-1])
                targets.append(whole[1:])
                n_cont.append(len(continuation))
            scores = self.engine.score(rows, targets)
            for j, i in enumerate(batch):
                end = len(rows[j])
                logprob = float(scores.logprobs[j, end - n_cont[j] : end].sum())
                greedy = bool(scores.greedy[j, end - n_cont[j] : end].all())
                results[i] = (logprob, greedy)
                self.cache_hook.add_partial("loglikelihood", requests[i][0], results[i])
        return results  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        out = []
        for request in requests:
            (string,) = request.args
            windows = [
                (None, *make_disjoint_window(w))
                for w in get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                )
            ]
            total = sum(logprob for logprob, _ in self._loglikelihood_tokens(windows))
            out.append(total)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
        return out

    # ---- generation ----------------------------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        eos_text = self.tok_decode([self.eot_token_id], skip_special_tokens=False)
        rows, stops = [], []
        for request in requests:
            context, gen_kwargs = request.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            max_gen = int(kwargs.pop("max_gen_toks"))
            max_ctx = self.max_length - max_gen
            if max_ctx <= 0:
                raise config_error(
                    "max_gen_toks",
                    max_gen,
                    f"must be below the model's max length {self.max_length} (room is needed for the context)",
                    "pass a smaller max_gen_toks in the task's generation_kwargs or --gen_kwargs",
                )
            prompt = self.tok_encode(context)[-max_ctx:]
            temperature = float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample") else 0.0
            rows.append(
                Row(
                    prompt=prompt,
                    max_new_tokens=max_gen,
                    temperature=temperature,
                    top_k=int(kwargs.get("top_k") or 0),
                    top_p=float(kwargs.get("top_p") or 1.0),
                    seed=kwargs.get("seed"),
                    eos_token_ids=self._eos_ids,
                    stop=self._stop_check(until),
                )
            )
            stops.append(until)
        decode(self.engine, rows, max_batch_size=self.batch_size)
        out = []
        for request, row, until in zip(requests, rows, stops, strict=True):
            text = postprocess_generated_text(self.tok_decode(row.new), until, None)
            out.append(text)
            self.cache_hook.add_partial("generate_until", request.args, text)
        return out

    def _stop_check(self, until: list[str]):
        terms = [t for t in until if t]

        def stop(new: list[int]) -> bool:
            text = self.tok_decode(new)
            return any(t in text for t in terms)

        return stop


def task_manager(names: list[str], include_path: str | None):
    """lm-eval's TaskManager that knows `names`. Indexing lm-eval's ~15k built-in task files takes 40 s or
    more on a small machine, so when every name is a task of `include_path` only that folder is indexed
    (the tasks are the same either way: the include path takes precedence over the built-ins)."""
    if include_path is not None:
        local = TaskManager(include_path=include_path, include_defaults=False)
        if all(n in local.all_tasks for n in names):
            return local
    return TaskManager(include_path=include_path)
