"""The data-parallel strategy's rules (ddp, megatron_fsdp, fsdp2 / HSDP), checked by ParallelLayout.

Pure Python, as bridge.parallel.layout; the reasons are in docs/parallelism.md ("Data-parallel strategies").
"""

from __future__ import annotations

from typing import Protocol

from bridge.parallel.layout_rules import fail


class ParallelSizes(Protocol):
    """What these rules read of a ParallelLayout (typed here: layout.py imports this module)."""

    strategy: str
    dp_replicate_size: int | None
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    dp: int
    sequence_parallel: bool


def check_strategy(layout: ParallelSizes) -> None:
    """The data-parallel strategy's rules (docs/parallelism.md, "Data-parallel strategies")."""
    s = layout.strategy
    if layout.dp_replicate_size is not None and s != "fsdp2":
        fail(
            "dp_replicate_size",
            layout.dp_replicate_size,
            f"HSDP replication is an fsdp2 option; strategy is {s!r}",
            "remove distributed.dp_replicate_size, or use distributed.strategy=fsdp2",
        )
    if s == "ddp":
        # PyTorch DDP replicates the whole model: data parallelism only.
        for name in ("tp", "pp", "cp", "ep", "etp"):
            value = getattr(layout, name)
            if value > 1:
                fail(
                    name,
                    value,
                    "strategy 'ddp' is data parallelism only (no TP, PP, CP, EP or ETP)",
                    f"set {name}=1, or use distributed.strategy=megatron for model parallelism",
                )
    elif s == "megatron_fsdp":
        # Megatron-FSDP has no pipeline, expert or sequence parallelism (NeMo AutoModel rejects them too).
        if layout.pp > 1:
            fail(
                "pp",
                layout.pp,
                "strategy 'megatron_fsdp' does not support pipeline parallelism",
                "set pp=1, or use distributed.strategy=megatron",
            )
        if layout.ep > 1:
            fail(
                "ep",
                layout.ep,
                "strategy 'megatron_fsdp' does not support expert parallelism",
                "set ep=1, or use distributed.strategy=megatron",
            )
        if layout.sequence_parallel:
            fail(
                "sequence_parallel",
                True,
                "strategy 'megatron_fsdp' does not support sequence parallelism",
                "set model.sequence_parallel=False, or use distributed.strategy=megatron",
            )
    elif s == "fsdp2":
        _check_fsdp2(layout)


def _check_fsdp2(layout: ParallelSizes) -> None:
    if layout.dp_replicate_size is not None:
        r, dp = layout.dp_replicate_size, layout.dp
        if dp % r:
            fail(
                "dp_replicate_size",
                r,
                f"must divide dp = world/(tp*pp*cp) = {dp}",
                f"use a divisor of {dp}",
            )
        if r >= dp:
            fail(
                "dp_replicate_size",
                r,
                f"must be < dp ({dp}): pure replication without sharding is not FSDP",
                "use a smaller value, or distributed.strategy=megatron for plain replication",
            )
    # NeMo AutoModel's rule: in an FSDP2 mesh the experts live on the dp*cp ranks, so ep | dp*cp.
    # (With `megatron` the expert grid folds across the TP ranks instead: only world % (pp*ep*etp).)
    if layout.ep > 1 and (layout.dp * layout.cp) % layout.ep:
        fail(
            "ep",
            layout.ep,
            f"with strategy 'fsdp2' the experts are laid out on the dp*cp mesh, so ep must divide "
            f"dp*cp = {layout.dp}*{layout.cp} = {layout.dp * layout.cp}",
            "choose ep dividing dp*cp, or use distributed.strategy=megatron",
        )
    # strategy fsdp2 runs on PyTorch's fully_shard (bridge/training/strategies.py) over the dense
    # mesh's (dp_replicate, dp_shard*cp) axes: HSDP, TP/SP, PP/VPP (Megatron-Core's 1f1b and
    # interleaved schedules) and tied embeddings run and match strategy megatron
    # (tests/functional/test_fsdp2*.py). With ep > 1 the experts are sharded over the MoE mesh's
    # ep_shard axis, which is Megatron-Core's expert data-parallel group only when etp = 1:
    if layout.ep > 1 and layout.etp > 1:
        fail(
            "etp",
            layout.etp,
            "with strategy 'fsdp2' and ep > 1 the experts are sharded over the (pp, ep_shard, ep) mesh, "
            "which matches Megatron-Core's expert groups only with etp = 1",
            "set model.expert_tensor_parallel_size=1, or use distributed.strategy=megatron",
        )
