"""Packed finetuning rows under context parallelism (gloo): the same 4 SFT iterations from one tiny
Hugging Face Llama under CP=1 and CP=2, every sample padded to a multiple of 4 (= 2*cp) in both.

`ref` (1 rank): writes the HF folder and the SFT data, then trains CP=1 (the reference).
`cp2` (2 ranks): CP=2; `tp2` (2 ranks): TP=2 with sequence parallelism, CP=1 (the reference of
`cp2_tp2`, 4 ranks: CP=2 x TP=2 + SP; TP=2 pads the vocabulary further, which changes the losses).
Each run emits per iteration the lm loss and grad norm.

usage: cp_packed_equivalence.py MODE[,MODE...] WORKDIR"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bridge.config.layout import run_layout
from bridge.config.run_plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for tests.finetune_fixtures

from train_common import emit, reset_parallel_state  # noqa: E402

MODES = {
    "ref": [],
    "cp2": ["model.context_parallel_size=2"],
    "tp2": ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"],
    "cp2_tp2": [
        "model.context_parallel_size=2",
        "model.tensor_model_parallel_size=2",
        "model.sequence_parallel=True",
    ],
}


def config(workdir: str, *extra: str):
    from bridge.config.compose import compose
    from recipes.llama_finetune import llama32_1b_sft_config

    hf = f"{workdir}/hf"
    cfg, _ = compose(  # as run_recipe.py does: the model section follows the HF folder
        llama32_1b_sft_config(),
        overrides=[
            f"checkpoint.pretrained_checkpoint={hf}",
            "tokenizer.tokenizer_type=HuggingFaceTokenizer",
            f"tokenizer.tokenizer_model={hf}",
            "dataset.kind=sft",
            f"dataset.data_paths=[{workdir}/sft.jsonl]",
            'dataset.split="1,0,0"',
            f"dataset.cache_dir={workdir}/cache",
            "model.seq_length=64",
            "dataset.packed_sequence_size=64",
            "dataset.pad_seq_to_mult=4",
            "train.train_iters=4",
            "train.global_batch_size=4",
            "train.micro_batch_size=1",
            "scheduler.lr_warmup_iters=1",
            "optimizer.lr=0.003",
            "optimizer.use_distributed_optimizer=False",
            "distributed.overlap_param_gather=False",
            "validation.eval_interval=0",
            "validation.eval_iters=0",
            "checkpoint.save=null",
            "checkpoint.save_interval=0",
            "logger.log_interval=1",
            "logger.tensorboard_dir=null",
            "dataset.num_workers=0",
            *extra,
        ],
    )
    return cfg


def main(modes: list[str], workdir: str) -> None:
    import torch

    from bridge.parallel import runtime
    from bridge.training import finetune

    if "ref" in modes:
        from tests.finetune_fixtures import make_tiny_llama, write_sft_jsonl

        make_tiny_llama(Path(workdir) / "hf")
        write_sft_jsonl(Path(workdir) / "sft.jsonl", 24, seed=5)
    world = int(os.environ["WORLD_SIZE"])
    for mode in modes:
        cfg = config(workdir, *MODES[mode])
        runtime.initialize_distributed(run_layout(cfg, world), seed=cfg.rng.seed)
        reset_parallel_state()
        result = finetune(build_plan(cfg, world, cuda=torch.cuda.is_available()))
        emit("run", {"run": mode, "losses": result.losses, "grad_norms": result.grad_norms})
        reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2])
