"""`bridge serve`: an OpenAI-compatible HTTP server over a bridge model at any TP / PP.

    bridge serve --hf-path DIR                                     # http://127.0.0.1:8000/v1
    torchrun --nproc_per_node=2 -m bridge.cli serve --hf-path DIR --tp 2 --port 8000

Endpoints: /v1/completions, /v1/chat/completions (the tokenizer's chat template), /v1/models, /health;
`"stream": true` streams server-sent events. Rank 0 serves HTTP and batches requests together; every rank
computes each step (bridge/inference/serve/). Ctrl-C (SIGINT) or SIGTERM on rank 0 stops all ranks.
"""

from __future__ import annotations

import argparse
import signal
import sys

from bridge.cli.model_command import run_model_command
from bridge.errors import config_error
from bridge.parallel.ranks import env_world_size


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bridge serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--hf-path", help="Hugging Face folder (imported on the fly)")
    p.add_argument("--megatron-path", help="bridge torch_dist checkpoint (root or iter_* folder)")
    p.add_argument("--hf-config", help="with --megatron-path: the HF folder with config.json and tokenizer")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size (default 1)")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free port)")
    p.add_argument("--served-model-name", help="the model id clients send (default: the path given)")
    p.add_argument("--max-batch-size", type=int, default=16, help="requests decoded together (default 16)")
    p.add_argument("--max-waiting", type=int, default=256, help="queued requests before 429 (default 256)")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    for flag, value in (("--max-batch-size", args.max_batch_size), ("--max-waiting", args.max_waiting)):
        if value < 1:
            raise config_error(flag, value, "must be >= 1", f"pass {flag} 16")
    if not 0 <= args.port < 65536:
        raise config_error("--port", args.port, "must be in 0..65535", "pass --port 8000")


def run(args: argparse.Namespace) -> None:
    from bridge.inference.engine import Engine
    from bridge.inference.loading import check_layout, load_model
    from bridge.inference.serve import Server

    check_layout(args.tp, args.pp, env_world_size(), "serving")
    loaded = load_model(
        hf_path=args.hf_path,
        megatron_path=args.megatron_path,
        hf_config=args.hf_config,
        tp=args.tp,
        pp=args.pp,
    )
    engine = Engine(loaded.chunks, loaded.provider.vocab_size)
    if not engine.is_driver:
        engine.serve_forever()
        return
    if loaded.tokenizer is None:
        engine.stop()
        raise config_error(
            "--hf-path" if args.hf_path else "--hf-config",
            args.hf_path or args.hf_config,
            "the server takes text, and the model's folder has no tokenizer files",
            "point it at a folder with the tokenizer (with --megatron-path: --hf-config HF_DIR)",
        )
    server = Server(
        engine,
        loaded.tokenizer,
        args.served_model_name or loaded.name,
        eos_token_ids=loaded.eos_token_ids,
        host=args.host,
        port=args.port,
        max_batch_size=args.max_batch_size,
        max_waiting=args.max_waiting,
    )
    signal.signal(signal.SIGTERM, lambda *_: server.scheduler.shutdown())
    print(
        f"serving {server.app.title} model {args.served_model_name or loaded.name!r} at {server.url}/v1",
        flush=True,
    )
    server.run_forever()


def main(argv: list[str] | None = None) -> int:
    return run_model_command(parse_args(argv), check_args, run)


if __name__ == "__main__":
    sys.exit(main())
