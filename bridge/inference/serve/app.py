"""The OpenAI-compatible HTTP API (FastAPI) over a Scheduler: /v1/completions, /v1/chat/completions,
/v1/models, /health. Streaming is server-sent events in OpenAI's chunk format, ending with `data: [DONE]`.

Every mistake in a request is a 4xx JSON body in OpenAI's shape, `{"error": {"message", "type", "param",
"code"}}`, and the server keeps serving: unknown model (404), invalid JSON or fields (400), a prompt that
leaves no room in the model's context (400), a full queue (429). Unsupported OpenAI fields are refused by
name (400), never silently ignored. Sampling: temperature (0 = greedy), top_p, max_tokens, stop strings,
seed, on bridge.inference.generate's sampler.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from bridge.inference.decode import Row
from bridge.inference.serve.scheduler import Job, QueueFull, Scheduler

MAX_STOP_STRINGS = 4  # OpenAI's limit


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def _error_body(
    message: str, param: str | None, code: str | None, kind: str = "invalid_request_error"
) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int | None = Field(default=None)
    max_completion_tokens: int | None = None
    temperature: float = 1.0  # OpenAI's default
    top_p: float = 1.0
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    n: int = 1
    user: str | None = None  # OpenAI's end-user tag: recorded by nothing here, accepted as the API allows


class CompletionRequest(_Sampling):
    prompt: str | list[int]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    content: str


class ChatRequest(_Sampling):
    messages: list[ChatMessage]


class ServeModel:
    """What the API serves: the scheduler, the tokenizer, the name clients use and the context length."""

    def __init__(
        self, scheduler: Scheduler, tokenizer: Any, name: str, max_length: int, eos_token_ids: list[int]
    ):
        self.scheduler = scheduler
        self.tokenizer = tokenizer
        self.name = name
        self.max_length = max_length
        self.eos = frozenset(eos_token_ids)
        self.created = int(time.time())


def _check_sampling(req: _Sampling, served: ServeModel, n_prompt: int, default_max: int) -> int:
    if req.model != served.name:
        raise ApiError(
            404,
            f"The model `{req.model}` does not exist; this server serves `{served.name}`.",
            "model",
            "model_not_found",
        )
    if req.n != 1:
        raise ApiError(400, f"n = {req.n}: only n = 1 is supported; send n separate requests.", "n")
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:
        max_tokens = min(default_max, served.max_length - n_prompt)
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens = {max_tokens}: must be >= 1.", "max_tokens")
    if n_prompt == 0:
        raise ApiError(400, "the prompt is empty: it needs at least one token.", "prompt")
    if n_prompt + max_tokens > served.max_length:
        raise ApiError(
            400,
            f"This model's maximum context length is {served.max_length} tokens; the prompt has {n_prompt} "
            f"tokens and max_tokens is {max_tokens}. Shorten the prompt or lower max_tokens "
            f"(at most {served.max_length - n_prompt}).",
            "max_tokens" if n_prompt < served.max_length else "prompt",
            "context_length_exceeded",
        )
    if not req.temperature >= 0:
        raise ApiError(400, f"temperature = {req.temperature}: must be >= 0 (0 = greedy).", "temperature")
    if not 0 < req.top_p <= 1:
        raise ApiError(400, f"top_p = {req.top_p}: must be in (0, 1].", "top_p")
    stops = _stops(req.stop)
    if len(stops) > MAX_STOP_STRINGS:
        raise ApiError(400, f"stop: at most {MAX_STOP_STRINGS} stop strings, got {len(stops)}.", "stop")
    return max_tokens


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [s for s in ([stop] if isinstance(stop, str) else stop) if s]


def _text(tokenizer: Any, ids: list[int], stops: list[str]) -> tuple[str, bool]:
    """The text of `ids`, cut before the first stop string; True when one was found."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _held_back(text: str, stops: list[str]) -> int:
    """How many characters at the end of `text` could be the start of a stop string (not sent yet)."""
    return max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)


def create_app(served: ServeModel) -> FastAPI:
    app = FastAPI(title="bridge serve")

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError):
        return JSONResponse(_error_body(err.message, err.param, err.code), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError):
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        message = (
            f"{where}: {first.get('msg', 'invalid request')}"
            if where
            else first.get("msg", "invalid request")
        )
        return JSONResponse(
            _error_body(f"Invalid request: {message}.", where, first.get("type")), status_code=400
        )

    @app.get("/health")
    async def health():
        s = served.scheduler
        return {
            "status": "ok",
            "active": s.active,
            "waiting": s.waiting,
            "steps": s.steps,
            "cancelled": s.cancelled,
        }

    @app.get("/v1/models")
    async def models():
        card = {"id": served.name, "object": "model", "created": served.created, "owned_by": "bridge"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        if isinstance(req.prompt, str):
            prompt = list(served.tokenizer.encode(req.prompt, add_special_tokens=True))
        else:
            prompt = list(req.prompt)
        return await _serve(req, prompt, chat=False, default_max=16)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest):
        if not getattr(served.tokenizer, "chat_template", None):
            raise ApiError(
                400, f"The model `{served.name}` has no chat template; use /v1/completions.", "messages"
            )
        messages = [m.model_dump() for m in req.messages]
        prompt = served.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):  # transformers 5 returns an encoding
            prompt = prompt["input_ids"]
        return await _serve(req, list(prompt), chat=True, default_max=served.max_length)

    async def _serve(req: _Sampling, prompt: list[int], chat: bool, default_max: int):
        max_tokens = _check_sampling(req, served, len(prompt), default_max)
        vocab = served.scheduler.engine.vocab_size
        if any(not 0 <= i < vocab for i in prompt):
            raise ApiError(400, f"prompt: token ids must be in [0, {vocab}).", "prompt")
        stops = _stops(req.stop)
        tok = served.tokenizer
        row = Row(
            prompt=prompt,
            max_new_tokens=max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            eos_token_ids=served.eos,
            stop=(lambda new: _text(tok, new, stops)[1]) if stops else None,
        )
        job = Job(row=row, loop=asyncio.get_running_loop())
        try:
            served.scheduler.submit(job)
        except QueueFull as err:
            raise ApiError(429, f"The server is busy ({err}); retry later.", None, "queue_full") from None
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        if req.stream:
            return StreamingResponse(_stream(job, ident, chat, stops), media_type="text/event-stream")
        try:
            reason = await _wait(job)
        finally:
            job.cancel()  # a client gone before the end frees the slot (no effect on a finished row)
        text, _ = _text(tok, _visible(row), stops)
        return _response(ident, chat, text, reason, len(prompt), len(row.new))

    def _visible(row: Row) -> list[int]:
        return [t for t in row.new if t not in served.eos]

    async def _wait(job: Job) -> str:
        while True:
            kind, value = await job.events.get()
            if kind == "done":
                return value
            if kind == "error":
                raise ApiError(500, f"generation failed: {value}", None, "generation_failed")

    def _response(ident: str, chat: bool, text: str, reason: str, n_prompt: int, n_new: int) -> dict:
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_new, "total_tokens": n_prompt + n_new}
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            kind = "text_completion"
        return {
            "id": ident,
            "object": kind,
            "created": int(time.time()),
            "model": served.name,
            "choices": [choice],
            "usage": usage,
        }

    def _chunk(ident: str, chat: bool, text: str | None, reason: str | None, first: bool) -> str:
        if chat:
            delta = ({"role": "assistant"} if first else {}) | ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "finish_reason": reason}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
            kind = "text_completion"
        body = {
            "id": ident,
            "object": kind,
            "created": int(time.time()),
            "model": served.name,
            "choices": [choice],
        }
        return f"data: {json.dumps(body)}\n\n"

    async def _stream(job: Job, ident: str, chat: bool, stops: list[str]) -> AsyncIterator[str]:
        sent = ""
        first = True
        try:
            while True:
                kind, value = await job.events.get()
                if kind == "error":
                    yield f"data: {json.dumps(_error_body(f'generation failed: {value}', None, 'generation_failed', 'server_error'))}\n\n"
                    return
                text, stopped = _text(served.tokenizer, _visible(job.row), stops)
                if kind == "token" and not stopped:  # a stop string may be starting: keep its part back
                    text = text[: len(text) - _held_back(text, stops)]
                delta = text[len(sent) :] if text.startswith(sent) else ""
                if delta:
                    sent += delta
                    yield _chunk(ident, chat, delta, None, first)
                    first = False
                if kind == "done":
                    yield _chunk(ident, chat, None, value, first)
                    yield "data: [DONE]\n\n"
                    return
        finally:
            job.cancel()  # the client went away mid-stream (or the stream ended): the slot is freed

    return app
