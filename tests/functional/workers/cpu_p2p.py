"""2 ranks, PP=2 VPP=2: Megatron-Core's interleaved schedule gives the same losses and gradients with
batch_p2p_comm=True as with False (at PP=2 the previous and next stage are the same rank).

Also the shape exchange of variable_seq_lengths: a bidirectional exchange with different activation
and gradient shapes must deliver each tensor (and its shape) to the right buffer, batched or not.
"""

from __future__ import annotations

import json

import runtime_common as rc
import torch
from train_common import write_line

from bridge.models.provider_layout import derive_layout
from bridge.parallel import runtime

SEED = 1234
MICROBATCHES = 8  # enough for a 1F1B steady state on both stages (warmup is 4 and 2 microbatches)


def run_interleaved(chunks: list, data: list[dict], batch_p2p_comm: bool) -> tuple[list[float], dict]:
    from megatron.core.pipeline_parallel import get_forward_backward_func

    config = chunks[0].config  # one TransformerConfig shared by every chunk
    config.batch_p2p_comm = batch_p2p_comm
    config.overlap_p2p_comm = False
    for chunk in chunks:
        chunk.zero_grad(set_to_none=True)
    out = get_forward_backward_func()(
        forward_step_func=rc._forward_step,
        data_iterator=[iter(data) for _ in chunks],
        model=chunks,
        num_microbatches=len(data),
        seq_length=rc.SEQ,
        micro_batch_size=rc.MICRO_BATCH,
    )
    grads = {
        f"{i}.{n}": p.grad.detach().clone() for i, c in enumerate(chunks) for n, p in c.named_parameters()
    }
    return [float(item["lm loss"]) for item in out], grads


def check_shape_exchange(batch_p2p_comm: bool) -> None:
    """send_forward_backward_recv_forward_backward with distinct shapes per direction and rank."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator
    from megatron.core.transformer import TransformerConfig

    config = TransformerConfig(
        num_layers=2, hidden_size=8, num_attention_heads=2, pipeline_dtype=torch.float32,
        variable_seq_lengths=True, moe_token_dispatcher_type="alltoall", batch_p2p_comm=batch_p2p_comm,
        pipeline_model_parallel_size=2,
        virtual_pipeline_model_parallel_size=2,
    )  # fmt: skip
    comm = P2PCommunicator(parallel_state.get_pipeline_model_parallel_group(), config)
    me, peer = rc.rank(), 1 - rc.rank()

    def tensor(rank: int, direction: int) -> torch.Tensor:  # direction 0: activation, 1: gradient
        return torch.full((3 + rank + 2 * direction, 1, 8), float(10 * rank + direction))

    recv_prev, recv_next = comm.send_forward_backward_recv_forward_backward(
        tensor(me, 0),
        tensor(me, 1),
        recv_prev=True,
        recv_next=True,
        tensor_shape=(1, 1, 8),  # overridden by the exchanged shapes
    )
    for got, want, what in (
        (recv_prev, tensor(peer, 0), "activation"),
        (recv_next, tensor(peer, 1), "gradient"),
    ):
        rc.check(
            got.shape == want.shape and torch.equal(got.detach(), want),
            f"batch_p2p_comm={batch_p2p_comm}: rank {me} {what} from rank {peer}: got shape "
            f"{tuple(got.shape)} value {float(got.flatten()[0])}, want {tuple(want.shape)} {float(want[0, 0, 0])}",
        )


def main() -> None:
    provider = rc.gpt_provider(pp=2)
    provider.virtual_pipeline_model_parallel_size = 2
    runtime.initialize_distributed(derive_layout(provider, 2), seed=SEED)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    rc.check(len(chunks) == 2, f"two virtual stages per rank, got {len(chunks)}")
    data = rc.batches(MICROBATCHES)

    results = {flag: run_interleaved(chunks, data, flag) for flag in (False, True)}
    (ref_losses, ref_grads), (losses, grads) = results[False], results[True]
    record = {"rank": rc.rank(), "unbatched": ref_losses, "batched": losses}
    grad_diff = max(float((grads[n] - ref_grads[n]).abs().max()) for n in ref_grads)
    record["max_grad_diff"] = grad_diff
    write_line("@@losses " + json.dumps(record))

    for flag in (False, True):
        check_shape_exchange(flag)
    write_line(f"@@shapes rank {rc.rank()} OK")
    runtime.destroy_distributed()


if __name__ == "__main__":
    main()
