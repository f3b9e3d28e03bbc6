"""2 ranks: TP=2 logits against TP=1 logits, then a tiny MoE with EP=2 trains one step.

Same weights at TP=1 and TP=2: both models are built from the same seed with use_cpu_initialization,
where Megatron-Core draws every full weight on the CPU generator and keeps this rank's slice (SwiGLU's
fc1 with its gate/up stride). So the TP=2 shards are exactly the TP=1 weights sliced, and the
gathered TP=2 logits must equal the TP=1 logits.
"""

from __future__ import annotations

import math

import runtime_common as rc
import torch

from bridge.models.provider_layout import derive_layout
from bridge.parallel import runtime

SEED = 4321


def logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(batch["tokens"], batch["position_ids"], attention_mask=None)


def check_tp_logits() -> None:
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    batch = rc.batches(1)[0]

    tp1 = rc.gpt_provider(tp=1)
    runtime.initialize_distributed(derive_layout(tp1, 2), seed=SEED)
    reference = logits(rc.build_model(tp1), batch)
    runtime.destroy_distributed()

    tp2 = rc.gpt_provider(tp=2)
    runtime.initialize_distributed(derive_layout(tp2, 2), seed=SEED)
    shard = logits(rc.build_model(tp2), batch)
    rc.check(shard.shape[-1] == rc.VOCAB // 2, f"vocab-parallel logits, got {tuple(shard.shape)}")
    full = gather_from_tensor_model_parallel_region(shard)
    rc.check(full.shape == reference.shape, f"{tuple(full.shape)} vs {tuple(reference.shape)}")
    torch.testing.assert_close(full, reference, rtol=0, atol=1e-5)
    print(
        f"rank {rc.rank()}: TP=2 logits == TP=1 logits (max diff {float((full - reference).abs().max()):.2e})"
    )
    runtime.destroy_distributed()


def check_moe_step() -> None:
    from megatron.core import parallel_state
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    provider = rc.gpt_provider(ep=2, num_moe_experts=4)
    runtime.initialize_distributed(derive_layout(provider, 2), seed=SEED)
    model = rc.build_model(provider, wrap_ddp=True, distributed_optimizer=True)
    rc.attach_grad_finalization([model])
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=True, clip_grad=1.0), [model]
    )
    local_experts = [n for n, _ in model.named_parameters() if ".experts." in n]
    rc.check(len(local_experts) > 0, "expert parameters on this rank")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    data = rc.batches(2, seed=1)
    model.zero_grad_buffer()
    optimizer.zero_grad()
    losses = rc.run_schedule([model], data)
    updated, grad_norm, _ = optimizer.step()
    rc.check(all(map(math.isfinite, losses)), f"losses {losses}")
    rc.check(
        updated and math.isfinite(grad_norm) and grad_norm > 0,
        f"step: updated={updated} grad_norm={grad_norm}",
    )
    for name, param in model.named_parameters():
        rc.check(not torch.equal(param.detach(), before[name]), f"{name} did not change in the step")

    # The replicated (non-expert) weights stay identical on both ranks after the distributed
    # optimizer's step; the experts differ (each rank holds its own two).
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    for name, param in model.named_parameters():
        peers = [torch.empty_like(param) for _ in range(2)]
        torch.distributed.all_gather(peers, param.detach().contiguous())
        if ".experts." not in name:
            rc.check(torch.equal(peers[0], peers[1]), f"replica drift in {name}")

    after = rc.run_schedule([model], data, forward_only=True)
    rc.check(
        sum(after) < sum(losses), f"one Adam step on the same batch lowers the loss: {losses} -> {after}"
    )
    print(
        f"rank {rc.rank()} ep_rank {ep_rank}: MoE EP=2 step OK loss {losses} -> {after} grad_norm {grad_norm:.4f}"
    )
    runtime.destroy_distributed()


def main() -> None:
    check_tp_logits()
    check_moe_step()


if __name__ == "__main__":
    main()
