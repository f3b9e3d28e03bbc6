"""4 ranks: TP=2 x PP=2 with sequence parallelism against the same model at PP=1.

Phase 1 (TP=2 PP=1 SP, DP=2) builds the model from a seed and runs Megatron-Core's schedule over
several microbatches: the reference losses and gradients. Phase 2 tears the groups down, builds
TP=2 PP=2 SP and loads phase 1's weights: both layouts keep the same TP rank per global rank (TP is
the fastest-varying group), so each stage takes this rank's phase-1 shards for its own layers. The
1F1B pipeline must give the same losses and gradients (1e-5), with gradients on every stage.
"""

from __future__ import annotations

import math

import runtime_common as rc
import torch

from bridge.errors import ConfigError
from bridge.models.provider_layout import derive_layout
from bridge.parallel import runtime

SEED = 1234
MICROBATCHES = 4


def global_layer_name(name: str, layer_offset: int) -> str:
    """decoder.layers.<local i>.x -> decoder.layers.<global i>.x (stage-local numbering in Megatron-Core)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "decoder" and parts[1] == "layers":
        parts[2] = str(int(parts[2]) + layer_offset)
    return ".".join(parts)


def main() -> None:
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    data = rc.batches(MICROBATCHES)

    # Phase 1: the PP=1 reference (DP=2 replicas see the same batch, so DDP's average is the same gradient).
    provider = rc.gpt_provider(tp=2, sp=True)
    runtime.initialize_distributed(derive_layout(provider, 4), seed=SEED)
    model = rc.build_model(provider, wrap_ddp=True)
    rc.attach_grad_finalization([model])
    ref_losses = rc.run_schedule([model], data)
    ref_state = {k: v.clone() for k, v in model.module.state_dict().items() if "_extra_state" not in k}
    ref_grads = rc.grads(model)
    rc.check(
        len(ref_losses) == MICROBATCHES and all(map(math.isfinite, ref_losses)), f"ref losses {ref_losses}"
    )
    runtime.destroy_distributed()

    # Phase 2: TP=2 x PP=2 with sequence parallelism, same weights.
    provider = rc.gpt_provider(tp=2, pp=2, sp=True)
    runtime.initialize_distributed(derive_layout(provider, 4), seed=SEED)
    runtime.initialize_distributed(
        derive_layout(provider, 4), seed=SEED
    )  # idempotent: no new groups, no second line
    try:
        runtime.initialize_distributed(rc.layout(4, tp=4), seed=SEED)
        raise AssertionError("other process-group sizes while initialized must raise")
    except ConfigError as err:
        rc.check("layout.tp=4" in str(err) and "destroy_distributed" in str(err), str(err))
    model = rc.build_model(provider, wrap_ddp=True)
    offset = get_transformer_layer_offset(model.config)
    stage_state = model.module.state_dict()
    with torch.no_grad():
        for name, tensor in stage_state.items():
            if "_extra_state" not in name:
                tensor.copy_(ref_state[global_layer_name(name, offset)])
    rc.attach_grad_finalization([model])
    losses = rc.run_schedule([model], data)

    stage = parallel_state.get_pipeline_model_parallel_rank()
    # Megatron-LM's convention: each stage its own seed, so stages do not draw identical layers.
    rc.check(torch.initial_seed() == SEED + 100 * stage, f"stage {stage} seed {torch.initial_seed()}")
    if parallel_state.is_pipeline_last_stage():
        rc.check(len(losses) == MICROBATCHES, f"{len(losses)} losses on the last stage")
        for got, want in zip(losses, ref_losses, strict=True):
            rc.check(abs(got - want) <= 1e-5, f"PP=2 loss {got} != PP=1 loss {want}")
    else:
        rc.check(losses == [], "only the last stage reports losses")

    stage_grads = rc.grads(model)
    rc.check(len(stage_grads) > 0, "stage has parameters")
    for name, grad in stage_grads.items():
        rc.check(
            grad is not None and bool(torch.isfinite(grad).all()),
            f"stage {stage}: grad of {name} missing/not finite",
        )
        rc.check(float(grad.abs().sum()) > 0, f"stage {stage}: grad of {name} is all zeros")
        want = ref_grads[global_layer_name(name, offset)]
        torch.testing.assert_close(
            grad, want, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"stage {stage} {n}: {m}"
        )

    # Sequence parallelism: each TP rank sees half the tokens, so norm-weight gradients are partial
    # until finalize_model_grads all-reduces the parameters marked `sequence_parallel` over TP.
    tp_group = parallel_state.get_tensor_model_parallel_group()
    norm_grads = [g for n, g in stage_grads.items() if "layernorm" in n]
    rc.check(len(norm_grads) > 0, "norm weights on every stage")
    for grad in norm_grads:
        peers = [torch.empty_like(grad) for _ in range(2)]
        torch.distributed.all_gather(peers, grad, group=tp_group)
        rc.check(torch.equal(peers[0], peers[1]), "sequence-parallel norm grads differ across TP ranks")

    print(
        f"rank {rc.rank()} stage {stage}: OK losses={losses} ref={ref_losses} params={len(stage_grads)}",
        flush=True,
    )
    runtime.destroy_distributed()
    rc.check(not runtime.is_initialized(), "destroy_distributed leaves nothing initialized")


if __name__ == "__main__":
    main()
