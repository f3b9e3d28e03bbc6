"""For one recipe of each model and setting (shrunk) and a table of override sets: what the dry run accepts, one real training
step runs; what it refuses, the real run refuses with the same message. Prints one RESULT line per case.

Every recipe runs as it is and with every refused case; the other accepted cases (settings that act the
same whatever the recipe) run on one dense and one MoE recipe, so the cost does not grow with the number
of recipes times the number of cases."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from recipes import recipe_info  # noqa: E402

# One pretraining recipe per model and kind of setting (the rows of a family's table differ in layout,
# sequence and batches, which the shrunk cases below replace): bridge's first ten recipes, Qwen2's bias
# on q/k/v, Gemma 3, full recompute (Qwen3 32B) and deterministic mode (Llama 3 70B). The fp8 recipes are
# refused on CPU by the dry run and the run alike (tests/unit/test_recipe_registry.py plans them for a GPU).
# The finetuning recipes start from trained weights and data files: tests/functional/test_finetune.py.
PRETRAIN_RECIPES = [
    "llama32_1b_pretrain_config",
    "llama32_3b_pretrain_config",
    "llama31_8b_pretrain_config",
    "llama31_70b_pretrain_config",
    "qwen3_8b_pretrain_4gpu_h100_bf16_config",
    "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
    "mixtral_8x7b_pretrain_config",
    "gemma2_2b_pretrain_config",
    "gemma2_9b_pretrain_config",
    "gemma2_27b_pretrain_config",
    "qwen25_7b_pretrain_config",
    "gemma3_1b_pretrain_config",
    "qwen3_32b_pretrain_config",
    "llama3_70b_pretrain_deterministic_config",
    "deepseek_v3_pretrain_config",  # uneven stages (a layout string), multi-latent attention
]
assert all(recipe_info(name).entry == "pretrain" for name in PRETRAIN_RECIPES)

TINY = [
    "model.num_layers=2", "model.hidden_size=64", "model.ffn_hidden_size=128", "model.num_attention_heads=4",
    "model.num_query_groups=2", "model.seq_length=64", "model.vocab_size=256",
    "model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=1",
    "model.virtual_pipeline_model_parallel_size=null", "model.context_parallel_size=1",
    "model.expert_model_parallel_size=1", "model.sequence_parallel=False",
    "train.train_iters=1", "train.global_batch_size=2", "train.micro_batch_size=1",
    "scheduler.lr_warmup_iters=0", "validation.eval_interval=0", "checkpoint.save=null",
    "checkpoint.save_interval=0", "logger.log_interval=1", "logger.tensorboard_dir=null",
]  # fmt: skip
MOE_TINY = ["model.num_moe_experts=4", "model.moe_ffn_hidden_size=64", "model.moe_router_topk=2"]
# recipes/deepseek.py (multi-latent attention, shared experts, routing groups, a PP16 layout string): their
# tiny shape, on one pipeline stage
MLA_TINY = [
    *MOE_TINY, "model.moe_layer_freq=1", "model.moe_shared_expert_intermediate_size=64",
    "model.moe_router_num_groups=null", "model.moe_router_group_topk=null",
    "model.pipeline_model_parallel_layout=null", "model.q_lora_rank=32", "model.kv_lora_rank=32",
    "model.qk_head_dim=16", "model.qk_pos_emb_head_dim=8", "model.v_head_dim=16", "model.kv_channels=24",
]  # fmt: skip

CASES = {
    "as_recipe": [],
    "bf16_on_cpu": ["mixed_precision.precision=bf16_mixed"],
    "activation_checkpointing": ["distributed.activation_checkpointing=true"],
    "workers": ["dataset.num_workers=2"],
    "evaluation": ["validation.eval_interval=1", "validation.eval_iters=1"],
    "micro_batch_2": ["train.micro_batch_size=2"],
    "ddp": [
        "distributed.strategy=ddp",
        "optimizer.use_distributed_optimizer=false",
        "distributed.overlap_grad_reduce=false",
        "distributed.overlap_param_gather=false",
    ],  # fmt: skip
    "fsdp2": ["distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=false"],
    "async_save": ["checkpoint.async_save=true"],  # accepted since issue 34 (no save directory here)
    # a torch.distributed.pipelining schedule on one rank: accepted with a warning, no pipeline runs
    "zero_bubble_on_pp1": ["distributed.pp_schedule=zero_bubble", "distributed.scale_grads_in_schedule=true"],
    # refused (the three that once passed the dry run and failed inside pretrain(), and others)
    "packed_sequences": ["dataset.packed_sequence_size=64"],
    "warmup_equal_to_iters": ["scheduler.lr_warmup_iters=1"],
    "bad_heads": ["model.num_attention_heads=3"],  # num_query_groups=2 must divide it
    "tensor_parallel_2_on_1": ["model.tensor_model_parallel_size=2"],
}


def run(args: list[str]) -> tuple[int, str]:
    sys.path.insert(0, str(REPO / "scripts" / "training"))
    import run_recipe

    err = io.StringIO()
    # main() runs in-process many times here: report as a plain process does (rank 0 prints every
    # line), not once per torchrun launch as bridge.cli.user_error does under torchrun
    error_file = os.environ.pop("TORCHELASTIC_ERROR_FILE", None)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = run_recipe.main(args)
    finally:
        if error_file is not None:
            os.environ["TORCHELASTIC_ERROR_FILE"] = error_file
    errors = [line for line in err.getvalue().splitlines() if line.startswith("error: ")]
    return code, errors[0] if errors else ""


REFUSED_CASES = (
    "packed_sequences",
    "warmup_equal_to_iters",
    "bad_heads",
    "tensor_parallel_2_on_1",
)
ON_EVERY_RECIPE = ("as_recipe", *REFUSED_CASES)
ACCEPTED_CASES_ON = (
    "llama32_1b_pretrain_config",
    "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
)  # dense, MoE


def _is_moe(recipe: str) -> bool:
    return "30b_a3b" in recipe or "mixtral" in recipe


def main() -> None:
    for recipe in PRETRAIN_RECIPES:
        moe = MLA_TINY if recipe_info(recipe).module == "deepseek" else MOE_TINY if _is_moe(recipe) else []
        for case, extra in CASES.items():
            if case not in ON_EVERY_RECIPE and recipe not in ACCEPTED_CASES_ON:
                continue
            given = {o.split("=", 1)[0] for o in extra}
            base = [o for o in (*TINY, *moe) if o.split("=", 1)[0] not in given]  # the case's value wins
            args = ["--recipe", recipe, *base, *extra]
            dry_code, dry_error = run([*args, "--dry-run", "--device", "cpu"])
            run_code, run_error = run(args)
            print(
                "RESULT " + json.dumps([recipe, case, dry_code, dry_error, run_code, run_error]), flush=True
            )


if __name__ == "__main__":
    main()
