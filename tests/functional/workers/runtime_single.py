"""A plain `python` process (no torchrun): initialize_distributed, build a model, forward, and the
runtime's rules (world-size check before any group exists, idempotence, teardown, re-init)."""

from __future__ import annotations

import os

import runtime_common as rc
import torch

from bridge.errors import ConfigError
from bridge.models.provider_layout import derive_layout
from bridge.parallel import ranks, runtime
from bridge.parallel.layout import ParallelLayout


def expect_config_error(fn, *words: str) -> None:
    try:
        fn()
    except ConfigError as err:
        for word in words:
            rc.check(word in str(err), f"{word!r} not in: {err}")
        return
    raise AssertionError(f"no ConfigError (expected one mentioning {words})")


def check_activation_recompute(model) -> None:
    """Full recompute reruns each layer's forward inside backward: same loss and gradients."""
    provider = rc.gpt_provider()
    provider.recompute_granularity = "full"
    provider.recompute_method = "uniform"
    provider.recompute_num_layers = 1
    recomputed = rc.build_model(provider)
    recomputed.load_state_dict(model.state_dict())
    data = rc.batches(2, seed=3)
    results = []
    for module in (model, recomputed):
        module.zero_grad()
        losses = rc.run_schedule([module], data)
        results.append((losses, rc.grads(module)))
    (plain_losses, plain_grads), (re_losses, re_grads) = results
    rc.check(plain_losses == re_losses and len(plain_losses) == 2, f"{plain_losses} vs {re_losses}")
    for name, grad in plain_grads.items():
        rc.check(
            grad is not None and torch.equal(grad, re_grads[name]), f"recompute changed the grad of {name}"
        )


def main() -> None:
    rc.check("RANK" not in os.environ and "WORLD_SIZE" not in os.environ, "run without torchrun")
    rc.check(ranks.env_world_size() == 1, "a plain process is a world of one")

    # A layout for 2 processes in a world of one: refused before any process group exists.
    expect_config_error(
        lambda: runtime.initialize_distributed(rc.layout(2, tp=2)), "world_size=2", "torchrun"
    )
    rc.check(not torch.distributed.is_initialized(), "no process group after a refused layout")

    one = derive_layout(rc.gpt_provider(), 1)
    runtime.initialize_distributed(one, seed=11)
    rc.check(
        runtime.is_initialized() and torch.distributed.get_world_size() == 1, "initialized, world of one"
    )
    runtime.initialize_distributed(one, seed=11)  # idempotent
    # Same process-group sizes, other non-group fields (no model shape, strategy): the same groups.
    runtime.initialize_distributed(rc.layout(1, strategy="ddp", gpus_per_node=4), seed=11)
    expect_config_error(lambda: runtime.initialize_distributed(one, seed=12), "seed=12", "seed=11")

    model = rc.build_model(rc.gpt_provider())
    batch = rc.batches(1)[0]
    with torch.no_grad():
        first = model(batch["tokens"], batch["position_ids"], attention_mask=None)
    rc.check(first.shape == (rc.MICRO_BATCH, rc.SEQ, rc.VOCAB), f"logits shape {tuple(first.shape)}")
    rc.check(bool(torch.isfinite(first).all()), "finite logits")
    # Causal: the logits at position t cannot depend on tokens after t.
    changed = batch["tokens"].clone()
    changed[:, -1] = (changed[:, -1] + 1) % rc.VOCAB
    with torch.no_grad():
        second = model(changed, batch["position_ids"], attention_mask=None)
    torch.testing.assert_close(second[:, :-1], first[:, :-1], rtol=0, atol=0)
    rc.check(not torch.equal(second[:, -1], first[:, -1]), "the last position sees its own token")
    check_activation_recompute(model)

    runtime.destroy_distributed()
    rc.check(not runtime.is_initialized() and not torch.distributed.is_initialized(), "torn down")
    # A fresh start after teardown: the provider initializes distributed itself (one process).
    chunks = rc.gpt_provider().provide_distributed_model(wrap_with_ddp=False)
    rc.check(runtime.is_initialized(), "provide_distributed_model initialized the runtime")
    with torch.no_grad():
        again = chunks[0](batch["tokens"], batch["position_ids"], attention_mask=None)
    rc.check(bool(torch.isfinite(again).all()), "finite logits after re-initialization")
    runtime.destroy_distributed()

    # Groups made behind the runtime's back: a clear error, not Megatron-Core's assertion.
    from megatron.core import parallel_state

    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    expect_config_error(
        lambda: runtime.initialize_distributed(one, seed=11), "already exist", "destroy_distributed"
    )
    runtime.destroy_distributed()
    rc.check(not torch.distributed.is_initialized(), "destroy_distributed tears down groups it did not make")

    # Layout warnings are logged with the layout line (a layout of one has none, so add one).
    class WarnedLayout(ParallelLayout):
        @property
        def warnings(self) -> list[str]:
            return ["demo warning from the layout"]

    runtime.initialize_distributed(WarnedLayout(world_size=1), seed=11)
    runtime.destroy_distributed()
    print("single process OK")


if __name__ == "__main__":
    main()
