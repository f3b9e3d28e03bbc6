"""2 ranks: checkpoint.save_consolidated writes a Hugging Face copy inside each checkpoint, for strategy
fsdp2 (DTensor shards gathered over dp) and strategy megatron. After training, every rank computes the
live model's logits on a fixed batch; rank 0 loads the copy with transformers and reports the largest
difference (fp32).

usage: consolidated_save.py WORKDIR"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from train_common import emit, reset_parallel_state, tiny_config

from bridge.config.layout import run_layout

STRATEGIES = {
    "fsdp2": ["distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=False"],
    "megatron": [],
}


def live_logits(model: list, ids):
    import torch

    positions = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    with torch.no_grad():
        for chunk in model:
            chunk.eval()
        return model[0](input_ids=ids, position_ids=positions, attention_mask=None)


def main(workdir: str) -> None:
    import torch

    from bridge.parallel import runtime

    pretrain_module = importlib.import_module(
        "bridge.training.pretrain"
    )  # the module, not bridge.training's function

    w = Path(workdir)
    runtime.initialize_distributed(run_layout(tiny_config(), 2), seed=1234)
    reset_parallel_state()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    models: dict = {}
    original_train = pretrain_module.train

    def keep_model(ctx):  # the trained chunks, for the live logits
        result = original_train(ctx)
        models["model"] = ctx.model
        return result

    for name, extra in STRATEGIES.items():
        pretrain_module.train = keep_model  # the loop pretrain() calls, by its module's name for it
        try:
            pretrain_module.pretrain(
                tiny_config(
                    *extra,
                    "train.train_iters=2",
                    f"checkpoint.save={w}/{name}",
                    "checkpoint.save_consolidated=True",
                    "checkpoint.hf_architecture=LlamaForCausalLM",
                )
            )
        finally:
            pretrain_module.train = original_train
        logits = live_logits(models.pop("model"), ids)
        folder = w / name / "iter_0000002" / "consolidated"
        record = {
            "strategy": name,
            "files": sorted(p.name for p in folder.iterdir()) if folder.is_dir() else [],
        }
        if torch.distributed.get_rank() == 0:
            from transformers import AutoModelForCausalLM

            hf = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32).eval()
            with torch.no_grad():
                ref = hf(ids).logits
            record["max_abs_diff"] = float((logits[..., : ref.shape[-1]] - ref).abs().max())
            record["logit_scale"] = float(ref.abs().max())
        emit("consolidated", record)
        reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1])
