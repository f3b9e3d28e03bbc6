"""`bridge serve` throughput on CPU: requests/s and tokens/s at 1, 4 and 16 concurrent clients, beside
transformers' `generate` on the same model in the same run.

    python benchmarks/serve.py [--layers 4 --hidden 256 --new-tokens 32 --requests 16]

A random Llama (fp32) with a word-level tokenizer is saved to a temporary folder; no EOS id, so every
request generates exactly --new-tokens tokens (greedy) on both sides. One process (TP=1):

- bridge serve: `bridge.inference.serve.Server` on 127.0.0.1 (the CLI's server, its scheduler in a thread);
  C client threads with the `openai` client send --requests completions in all (each client in turn);
  wall time from the first request to the last answer.
- transformers generate: the same prompts, `generate(max_new_tokens, do_sample=False)` (KV cache) on
  batches of C prompts (left padding; C = 1 is one prompt at a time), wall time for all of them.

tokens/s counts generated tokens only. The server recomputes the whole sequence each step (continuous
batching without a KV cache, bridge/inference/decode.py), transformers uses its KV cache: the table shows
what that costs and what batching gains.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path


def make_model(folder: Path, layers: int, hidden: int, vocab: int, max_len: int) -> None:
    import torch
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 128), max_position_embeddings=max_len,
        eos_token_id=None, bos_token_id=None, pad_token_id=None, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    raw = Tokenizer(
        WordLevel({f"w{i}": i for i in range(vocab - 1)} | {"<unk>": vocab - 1}, unk_token="<unk>")
    )
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>").save_pretrained(str(folder))


def prompts(n: int, length: int, vocab: int) -> list[str]:
    import random

    rng = random.Random(0)
    return [" ".join(f"w{rng.randrange(vocab - 1)}" for _ in range(length)) for _ in range(n)]


def bench_server(url: str, texts: list[str], clients: int, new_tokens: int) -> tuple[float, int]:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
    counts: list[int] = []
    todo = list(range(len(texts)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            out = client.completions.create(
                model="bench", prompt=texts[i], max_tokens=new_tokens, temperature=0
            )
            with lock:
                counts.append(out.usage.completion_tokens)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, sum(counts)


def bench_hf(model, tok, texts: list[str], batch: int, new_tokens: int) -> tuple[float, int]:
    import torch

    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = "<unk>"
    total = 0
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        enc = tok(texts[i : i + batch], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                eos_token_id=None, pad_token_id=tok.pad_token_id,
            )  # fmt: skip
        total += (out.shape[1] - enc["input_ids"].shape[1]) * out.shape[0]
    return time.perf_counter() - start, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    p.add_argument("--concurrency", default="1,4,16")
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bridge.inference.engine import Engine
    from bridge.inference.loading import load_model
    from bridge.inference.serve import Server

    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        make_model(
            folder, args.layers, args.hidden, args.vocab, max_len=args.prompt_tokens + args.new_tokens + 8
        )
        texts = prompts(args.requests, args.prompt_tokens, args.vocab)
        loaded = load_model(hf_path=str(folder))
        engine = Engine(loaded.chunks, loaded.provider.vocab_size)
        server = Server(
            engine, loaded.tokenizer, "bench", eos_token_ids=[], max_batch_size=max(levels)
        ).start()
        hf = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32).eval()
        hf_tok = AutoTokenizer.from_pretrained(str(folder))
        bench_server(server.url, texts[:2], 1, 4)  # warm-up (first-call allocations, HTTP connection)
        bench_hf(hf, hf_tok, texts[:2], 1, 4)
        rows = []
        for c in levels:
            s_time, s_tokens = bench_server(server.url, texts, c, args.new_tokens)
            h_time, h_tokens = bench_hf(hf, hf_tok, texts, c, args.new_tokens)
            rows.append((c, s_time, s_tokens, h_time, h_tokens))
        server.close()

    print(
        f"\nmodel: Llama {args.layers} layers x {args.hidden}, vocab {args.vocab}, fp32, CPU, "
        f"torch threads {torch.get_num_threads()}; {args.requests} requests of {args.prompt_tokens} prompt "
        f"tokens + {args.new_tokens} new (greedy) per level\n"
    )
    print(
        "| clients | bridge serve req/s | bridge serve tokens/s | HF generate (batch = clients) req/s | HF generate tokens/s |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for c, s_time, s_tokens, h_time, h_tokens in rows:
        print(
            f"| {c} | {args.requests / s_time:.2f} | {s_tokens / s_time:.1f} | "
            f"{args.requests / h_time:.2f} | {h_tokens / h_time:.1f} |"
        )


if __name__ == "__main__":
    main()
