"""`bridge serve`'s server (one process, TP=1) through the `openai` client on 127.0.0.1: greedy answers equal
transformers' generate and scripts/inference/generate.py, 16 concurrent clients, streaming, bad requests
(4xx JSON, the server keeps serving), a client leaving mid-stream frees its slot."""

from __future__ import annotations

import http.client
import importlib.util
import json
import threading
import time
from pathlib import Path

import pytest
import torch

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("single_process_groups"),
]

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ 'w3' if m['role'] == 'user' else 'w4' }} {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}w5{% endif %}"
)
NAME = "tiny"
TIMEOUT_S = 120  # a bound on any one client call (the tiny model answers in well under a second)
CLI_PATH = Path(__file__).resolve().parents[2] / "scripts" / "inference" / "generate.py"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import AutoTokenizer

    from tests.lm_eval_fixtures import save_text_model

    folder = tmp_path_factory.mktemp("serve") / "model"
    hf = save_text_model(folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(folder))
    return folder, hf, tok


@pytest.fixture(scope="module")
def server(model_dir):
    from bridge.inference.engine import Engine
    from bridge.inference.loading import load_model
    from bridge.inference.serve import Server

    folder, _, _ = model_dir
    loaded = load_model(hf_path=str(folder))
    engine = Engine(loaded.chunks, loaded.provider.vocab_size)
    srv = Server(engine, loaded.tokenizer, NAME, eos_token_ids=loaded.eos_token_ids).start()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=TIMEOUT_S, max_retries=0)


def _hf_greedy(hf, ids: list[int], n: int) -> list[int]:
    """transformers' greedy continuation, stopped at EOS (id 2) as the server stops."""
    x = torch.tensor([ids])
    out = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n, pad_token_id=0)
    return out[0, len(ids) :].tolist()


def _text(tok, ids: list[int]) -> str:
    return tok.decode([i for i in ids if i != 2], skip_special_tokens=True)


def _prompt(i: int) -> str:
    return " ".join(f"w{(7 * i + 13 * k) % 230 + 5}" for k in range(3 + i % 5))


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list().data] == [NAME]
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    conn.request("GET", "/health")
    assert json.loads(conn.getresponse().read())["status"] == "ok"


def test_greedy_completion_equals_transformers_and_the_script(client, model_dir, capsys):
    _, hf, tok = model_dir
    prompt = _prompt(1)
    ids = tok.encode(prompt)
    reference = _hf_greedy(hf, ids, 12)
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=12, temperature=0)
    assert out.choices[0].text == _text(tok, reference)
    assert out.usage.completion_tokens == len(reference)
    assert out.choices[0].finish_reason == ("stop" if reference[-1] == 2 else "length")
    # scripts/inference/generate.py on the same folder, same prompt ids
    spec = importlib.util.spec_from_file_location("generate_cli", CLI_PATH)
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    capsys.readouterr()
    folder = model_dir[0]
    assert (
        cli.main(
            [
                "--hf-path",
                str(folder),
                "--prompt-ids",
                ",".join(map(str, ids)),
                "--max-new-tokens",
                "12",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["ids"] == reference


def test_sixteen_concurrent_clients(client, model_dir):
    _, hf, tok = model_dir
    prompts = [_prompt(i) for i in range(16)]
    answers: dict[int, str] = {}
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            out = client.completions.create(model=NAME, prompt=prompts[i], max_tokens=10, temperature=0)
            answers[i] = out.choices[0].text
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=TIMEOUT_S)
    assert not errors, errors
    for i, p in enumerate(prompts):
        assert answers[i] == _text(tok, _hf_greedy(hf, tok.encode(p), 10)), i


def test_chat_uses_the_template_and_streams_the_same_text(client, model_dir):
    _, hf, tok = model_dir
    messages = [{"role": "user", "content": "w9 w10 w11"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert ids == "w3 w9 w10 w11 w5"
    reference = _text(tok, _hf_greedy(hf, tok.encode(ids), 8))
    out = client.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0)
    assert out.choices[0].message.content == reference
    assert out.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=8, temperature=0, stream=True
    )
    pieces = [c.choices[0].delta.content or "" for c in stream]
    assert "".join(pieces) == reference
    streamed = client.completions.create(model=NAME, prompt=ids, max_tokens=8, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == reference


def test_stop_strings_seed_and_top_p(client, model_dir):
    _, hf, tok = model_dir
    # a prompt whose greedy answer has a word not in the text before it: stop there
    for prompt in (_prompt(i) for i in range(2, 40)):
        text = _text(tok, _hf_greedy(hf, tok.encode(prompt), 10))
        words = text.split(" ")
        k = next((k for k in range(1, len(words)) if words[k] not in " ".join(words[:k])), None)
        if k is not None:
            break
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=10, temperature=0, stop=[words[k]])
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].text == text[: text.index(words[k])]
    # streamed: the same text (a word that could begin the stop string is held back until it cannot)
    stream = client.completions.create(
        model=NAME, prompt=prompt, max_tokens=10, temperature=0, stop=[words[k]], stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == out.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "stop"
    full = words
    sampled = [
        client.completions.create(
            model=NAME, prompt=prompt, max_tokens=10, temperature=1.5, top_p=0.9, seed=s
        )
        .choices[0]
        .text
        for s in (7, 7, 8)
    ]
    assert sampled[0] == sampled[1]  # the seed fixes the draw
    assert sampled[0] != " ".join(full) or sampled[2] != " ".join(full)  # and it samples


def _raw_post(server, path: str, body: bytes) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_bad_requests_get_a_4xx_json_error_and_the_server_keeps_serving(client, server):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="other", prompt="w5", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="max_tokens = -1: must be >= 1"):
        client.completions.create(model=NAME, prompt="w5", max_tokens=-1)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 64"):
        client.completions.create(model=NAME, prompt=" ".join(["w5"] * 70), max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="frequency_penalty"):
        client.completions.create(model=NAME, prompt="w5", max_tokens=2, frequency_penalty=0.5)
    status, body = _raw_post(server, "/v1/completions", b'{"model": "tiny", "prompt": ')
    assert status == 400 and body["error"]["type"] == "invalid_request_error", body
    status, body = _raw_post(server, "/v1/chat/completions", b'{"model": "tiny"}')
    assert status == 400 and body["error"]["param"] == "messages", body
    out = client.completions.create(model=NAME, prompt="w5 w6", max_tokens=3, temperature=0)
    assert out.usage.completion_tokens >= 1


def _health(server) -> dict:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    conn.request("GET", "/health")
    return json.loads(conn.getresponse().read())


def test_a_client_leaving_mid_stream_frees_its_slot(server, model_dir):
    _, hf, tok = model_dir
    # a prompt whose greedy answer runs to max_tokens (no EOS), so only the disconnect can end it early
    prompt = next(p for p in (_prompt(i) for i in range(3, 40)) if 2 not in _hf_greedy(hf, tok.encode(p), 50))
    before = _health(server)["cancelled"]
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    body = json.dumps({"model": NAME, "prompt": prompt, "max_tokens": 50, "temperature": 0, "stream": True})
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    assert response.read(6) == b"data: "  # the first token arrived
    conn.sock.shutdown(2)
    conn.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        health = _health(server)
        if health["cancelled"] > before and health["active"] == 0:
            break
        time.sleep(0.05)
    assert health["cancelled"] == before + 1 and health["active"] == 0, health


def test_held_back_is_the_longest_end_that_starts_a_stop_string():
    from bridge.inference.serve.app import _held_back

    assert _held_back("w5 w1", ["w17"]) == 2  # "w1" may become "w17"
    assert _held_back("w5 w", ["w17", " w9"]) == 2  # " w" may become " w9"
    assert _held_back("w5 w6", ["w17"]) == 0
    assert _held_back("w5", []) == 0
