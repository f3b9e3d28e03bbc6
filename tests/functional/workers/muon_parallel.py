"""2 ranks, optimizer.optimizer=muon (megatron-core >= 0.19): the same 4 steps from the same saved start at
TP=1 (DP=2) and TP=2, and, on a tiny MoE, at EP=1 (DP=2) and EP=2. Newton-Schulz in fp32
(muon_fp32_matmul_prec=highest), so that the layouts differ by rounding only. TP=2 runs each
muon_tp_mode: duplicated and distributed orthogonalize the whole matrix as TP=1 does; blockwise each rank's
shard alone (a different update, recorded to show the comparison can fail). Skipped (nothing emitted)
where the plan refuses Muon (megatron-core 0.16.1)."""

from __future__ import annotations

import sys

from train_common import emit, reset_parallel_state, run_model_chunks, tiny_config

MUON = [
    "optimizer.optimizer=muon",
    "optimizer.use_distributed_optimizer=false",
    "distributed.overlap_param_gather=false",
    "optimizer.lr=0.01",
    "optimizer.muon_nesterov=true",
    "optimizer.muon_fp32_matmul_prec=highest",
    "train.train_iters=4",
]
# sequential experts (grouped GEMM is GPU-only), all-to-all dispatch
MOE = ["model.num_moe_experts=4", "model.moe_ffn_hidden_size=64", "model.moe_router_topk=2",
       "model.moe_grouped_gemm=false", "model.moe_token_dispatcher_type=alltoall"]  # fmt: skip
TP2 = ["model.tensor_model_parallel_size=2"]
RUNS = {
    "dense": {
        "tp1": [],
        **{
            f"tp2_{mode}": [*TP2, f"optimizer.muon_tp_mode={mode}"]
            for mode in ("duplicated", "distributed", "blockwise")
        },
    },
    "moe": {"ep1": MOE, "ep2": [*MOE, "model.expert_model_parallel_size=2"]},
}


def main(workdir: str) -> None:
    import torch

    from bridge.checkpoint import save_checkpoint
    from bridge.config.checks.muon import MEGATRON_CORE_MIN, _release, emerging_optimizers_version
    from bridge.config.layout import run_layout
    from bridge.models.transformer_fields import INSTALLED_RELEASE
    from bridge.parallel import runtime
    from bridge.training import pretrain

    if _release(INSTALLED_RELEASE) < MEGATRON_CORE_MIN or emerging_optimizers_version() is None:
        return  # the plan refuses Muon here (tests/unit/test_muon.py)
    for kind, runs in RUNS.items():
        # one start for every layout: a random initialisation depends on it (experts: on EP)
        init = f"{workdir}/init_{kind}"
        base = tiny_config(*MUON, *(MOE if kind == "moe" else []))
        runtime.initialize_distributed(run_layout(base, 2), seed=base.rng.seed)
        save_checkpoint(init, 0, run_model_chunks(base, 2), save_rng=False)
        torch.distributed.barrier()
        reset_parallel_state()
        for name, extra in runs.items():
            result = pretrain(tiny_config(*MUON, *extra, f"checkpoint.pretrained_checkpoint={init}"))
            emit(f"{kind}_{name}", {"losses": result.losses, "grad_norms": result.grad_norms})
            reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1])
