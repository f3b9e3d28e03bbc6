"""2 ranks: a tiny dense multi-latent-attention model (query compression, 4 layers) trains 3 Adam steps from one
saved start at TP=1 (DP=2) and TP=2 + sequence parallelism (TP=2 without it is refused), and once more at TP=2
+ SP without bridge's RoPE-key gradient hook (bridge/models/mla_rope_grad.py) to show what it changes. Each run emits its losses and grad
norms, and every parameter's gradient norm after iterations 1 and 3 (cp_equivalence's recorder)."""

from __future__ import annotations

import sys

from cp_equivalence import ITERS, record_grads
from train_common import MLA_TINY, emit, reset_parallel_state, run_model_chunks, tiny_config

MLA = [*MLA_TINY, f"train.train_iters={ITERS}", "optimizer.lr=0.01", "optimizer.use_distributed_optimizer=false",
       "distributed.overlap_param_gather=false"]  # fmt: skip
TP2_SP = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true"]
RUNS = {"tp1": [], "tp2_sp": TP2_SP, "tp2_sp_unfixed": TP2_SP}


def main(workdir: str) -> None:
    import torch

    from bridge.checkpoint import save_checkpoint
    from bridge.config.layout import run_layout
    from bridge.models import mla_rope_grad
    from bridge.parallel import runtime
    from bridge.training import pretrain

    init = f"{workdir}/init"
    base = tiny_config(*MLA)
    runtime.initialize_distributed(run_layout(base, 2), seed=base.rng.seed)
    save_checkpoint(init, 0, run_model_chunks(base, 2), save_rng=False)
    torch.distributed.barrier()
    reset_parallel_state()
    fix = mla_rope_grad.whole_rope_key_gradient
    for name, extra in RUNS.items():
        if name == "tp2_sp_unfixed":
            mla_rope_grad.whole_rope_key_gradient = lambda model: 0  # Megatron-Core's gradient as it is
        record_grads(name)
        result = pretrain(tiny_config(*MLA, *extra, f"checkpoint.pretrained_checkpoint={init}"))
        mla_rope_grad.whole_rope_key_gradient = fix
        emit(name, {"losses": result.losses, "grad_norms": result.grad_norms})
        reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1])
