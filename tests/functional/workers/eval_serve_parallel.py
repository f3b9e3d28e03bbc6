"""Worker for tests/functional/test_eval_serve_parallel.py (2 gloo ranks).

    eval_serve_parallel.py ROOT

ROOT holds model/ (tests/lm_eval_fixtures.py's tiny text model) and tasks/ (its lm-eval tasks). One layout
after another on the same 2 ranks: `bridge eval` (bridge/cli/eval.py's run) at TP=2 and at PP=2, rank 0
writing ROOT/eval_<layout>.json (lm-eval's results with every sample); then `bridge serve`'s Server at
TP=2 and at PP=2, rank 0 its HTTP side plus an `openai` client in threads (SERVE_PROMPTS concurrently,
greedy; one streamed), writing ROOT/serve_<layout>.json. Last, a finetuning run from ROOT/train (lr 1e-30:
the weights stay the folder's) at TP=2 with sequence parallelism and validation.lm_eval_tasks, rank 0
writing the scores of its one benchmark to ROOT/train_tp2_sp.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import warnings
from pathlib import Path

from bridge.config.layout import run_layout
from bridge.config.run_plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
warnings.filterwarnings("ignore")

import torch.distributed as dist  # noqa: E402

LAYOUTS = {"tp2": (2, 1), "pp2": (1, 2)}
SERVE_PROMPTS = ["w5 w17 w42", "w9 w10 w11 w12", "w100 w3", "w33 w44 w55 w66 w77"]
SERVE_TOKENS = 8


def end_layout() -> None:
    from bridge.parallel.teardown import release_model_parallel_groups

    release_model_parallel_groups()


def run_eval(root: Path, layout: str) -> None:
    from bridge.cli.eval import parse_args, run
    from tests.lm_eval_fixtures import TASKS

    tp, pp = LAYOUTS[layout]
    args = parse_args(
        ["--hf-path", str(root / "model"), "--tp", str(tp), "--pp", str(pp), "--tasks", ",".join(TASKS),
         "--include-path", str(root / "tasks"), "--batch-size", "4",
         "--output-path", str(root / f"eval_{layout}.json"), "--log-samples"]
    )  # fmt: skip
    run(args)


def run_serve(root: Path, layout: str) -> None:
    import openai

    from bridge.inference.engine import Engine
    from bridge.inference.loading import load_model
    from bridge.inference.serve import Server

    tp, pp = LAYOUTS[layout]
    loaded = load_model(hf_path=str(root / "model"), tp=tp, pp=pp)
    engine = Engine(loaded.chunks, loaded.provider.vocab_size)
    if not engine.is_driver:
        engine.serve_forever()
        return
    server = Server(engine, loaded.tokenizer, "tiny", eos_token_ids=loaded.eos_token_ids).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=120, max_retries=0)
        answers: dict[str, str] = {}

        def ask(prompt: str) -> None:
            out = client.completions.create(
                model="tiny", prompt=prompt, max_tokens=SERVE_TOKENS, temperature=0
            )
            answers[prompt] = out.choices[0].text

        threads = [threading.Thread(target=ask, args=(p,)) for p in SERVE_PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stream = client.completions.create(
            model="tiny", prompt=SERVE_PROMPTS[0], max_tokens=SERVE_TOKENS, temperature=0, stream=True
        )
        streamed = "".join(c.choices[0].text for c in stream)
        try:
            client.completions.create(model="tiny", prompt="w5", max_tokens=-1)
            bad = None
        except openai.BadRequestError as err:
            bad = err.status_code
        (root / f"serve_{layout}.json").write_text(
            json.dumps({"answers": answers, "streamed": streamed, "bad": bad})
        )
    finally:
        server.close()  # releases rank 1 from serve_forever


def run_training(root: Path) -> None:
    import torch

    from bridge.parallel import runtime
    from bridge.training import finetune
    from tests.lm_eval_fixtures import training_config

    cfg = training_config(
        root / "train",
        "model.tensor_model_parallel_size=2",
        "model.sequence_parallel=True",
        "train.train_iters=1",
        "validation.lm_eval_tasks=[tiny_mc,tiny_ppl]",
        "validation.lm_eval_interval=1",
    )
    world = dist.get_world_size()
    runtime.initialize_distributed(run_layout(cfg, world), seed=cfg.rng.seed)
    result = finetune(build_plan(cfg, world, cuda=torch.cuda.is_available()))
    if dist.get_rank() == 0:
        (root / "train_tp2_sp.json").write_text(json.dumps(result.benchmark_scores[1]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    root = Path(p.parse_args().root)
    dist.init_process_group("gloo")
    for layout in LAYOUTS:
        run_eval(root, layout)
        end_layout()
    for layout in LAYOUTS:
        run_serve(root, layout)
        end_layout()
    run_training(root)
    end_layout()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
