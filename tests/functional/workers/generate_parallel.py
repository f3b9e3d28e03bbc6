"""Worker for tests/functional/test_generate_parallel.py (torchrun, 2 gloo ranks).

    generate_parallel.py ROOT

ROOT holds hf/<family>/ (tiny save_pretrained folders of tests/functional/workers/convert_models.py).
Layouts one after another on the same 2 ranks: tp1 (TP=1, two data-parallel replicas), tp2, pp2; per
family, greedy and seeded-sampled generation of PROMPT. Then ROOT/hf/llama_3layers at tp1 and on uneven
stages (UNEVEN: PP=2 holding 2 + 1 layers). Every rank prints
`RESULT <layout> <family> <greedy|sampled> <rank> <json ids>`. The last step runs
scripts/inference/generate.py's main() on ROOT/hf/llama with --pp 2 --json (its JSON line comes from
rank 0; tests/unit/test_generate.py runs the --megatron-path form in one process).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
warnings.filterwarnings("ignore")

import torch.distributed as dist  # noqa: E402

FAMILIES = ("llama", "qwen3_moe", "qwen3_5")  # one dense, one MoE, one Gated DeltaNet (its state carried)
PROMPT = [5, 17, 42, 99, 3, 7]
NEW_TOKENS = 32
SAMPLING = dict(temperature=0.8, top_k=20, top_p=0.9, seed=7)
LAYOUTS = {
    "tp1": {},
    "tp2": dict(tensor_model_parallel_size=2),
    "pp2": dict(pipeline_model_parallel_size=2),
}
# a 3-layer Llama (ROOT/hf/llama_3layers): tp1, and PP=2 on uneven stages
UNEVEN = {"tp1": {}, "pp2_uneven": dict(pipeline_model_parallel_size=2, num_layers_in_first_pipeline_stage=2)}
UNEVEN_FAMILY = "llama_3layers"
CLI_ARGS = ["--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "16", "--ignore-eos", "--json"]


def build(folder: Path, fields: dict):
    from bridge import AutoBridge

    provider = AutoBridge.from_hf_pretrained(folder).to_megatron_provider(load_weights=True)
    for name, value in fields.items():
        setattr(provider, name, value)
    return provider, provider.provide_distributed_model(wrap_with_ddp=False)


def run_layout(root: Path, layout: str, families=FAMILIES, layouts=LAYOUTS) -> None:
    from bridge.inference import generate

    for family in families:
        provider, chunks = build(root / "hf" / family, layouts[layout])
        for kind, options in (("greedy", {}), ("sampled", SAMPLING)):
            result = generate(chunks, PROMPT, NEW_TOKENS, vocab_size=provider.vocab_size, **options)
            print(f"RESULT {layout} {family} {kind} {dist.get_rank()} {json.dumps(result.ids)}", flush=True)


def run_cli(root: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "scripts" / "inference" / "generate.py"
    spec = importlib.util.spec_from_file_location("generate_cli", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main(["--hf-path", str(root / "hf" / "llama"), "--pp", "2", *CLI_ARGS])
    if code != 0:
        raise AssertionError(f"scripts/inference/generate.py exited {code}")


def end_layout() -> None:
    # Megatron-Core's groups go; the default gloo group stays for the next layout.
    from bridge.parallel.teardown import release_model_parallel_groups

    release_model_parallel_groups()


def main() -> None:
    root = Path(sys.argv[1])
    dist.init_process_group("gloo")
    for layout in LAYOUTS:
        run_layout(root, layout)
        end_layout()
    for layout in UNEVEN:
        run_layout(root, layout, (UNEVEN_FAMILY,), UNEVEN)
        end_layout()
    run_cli(root)
    end_layout()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
