"""CPU speed of the hybrid provider's plain-torch Mamba kernels: a tiny 4-layer hybrid (Mamba-2, attention,
MLP layers) against a GPT of the same widths, in the same process, forward + backward at seq 512.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/hybrid_cpu.py [--seq 512] [--batch 2] [--steps 5]

Both are built by their providers on one process (TP=1) in fp32; a step is forward, the summed
cross-entropy and backward (no optimizer); tokens/s is batch x seq / the median step time. The hybrid's
Mamba layers run bridge.parallel.ssm_kernels' chunked SSD scan (chunks of 128).
"""

from __future__ import annotations

import argparse
import statistics
import time

WIDTHS = dict(
    hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4, num_query_groups=4, vocab_size=1024,
    normalization="RMSNorm", params_dtype="fp32", add_bias_linear=False, should_pad_vocab=False,
)  # fmt: skip
SSM = dict(mamba_state_dim=64, mamba_head_dim=64, mamba_num_groups=2, mamba_num_heads=8, mamba_chunk_size=128)


def providers(seq: int):
    from bridge.models.gpt_provider import GPTModelProvider
    from bridge.models.hybrid_provider import MambaModelProvider

    hybrid = MambaModelProvider(
        **WIDTHS, **SSM, num_layers=4, hybrid_override_pattern="M*M-", activation_func="squared_relu",
        gated_linear_unit=False, seq_length=seq,
    )  # fmt: skip
    gpt = GPTModelProvider(
        **WIDTHS, num_layers=4, activation_func="squared_relu", gated_linear_unit=False, seq_length=seq,
        position_embedding_type="rope",
    )  # fmt: skip
    return {"hybrid M*M- (2 Mamba-2, 1 attention, 1 MLP)": hybrid, "GPT (4 x attention + MLP)": gpt}


def time_steps(model, batch: int, seq: int, steps: int) -> float:
    import torch

    tokens = torch.randint(0, WIDTHS["vocab_size"], (batch, seq))
    positions = torch.arange(seq).expand(batch, -1)
    times = []
    for _ in range(steps + 1):  # the first step warms up
        start = time.perf_counter()
        logits = model(tokens, positions, None)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))
        loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    import torch

    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    runtime.initialize_distributed(ParallelLayout(world_size=1))
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {args.batch} x seq {args.seq}"
    )
    print("| model | parameters | step (s) | tokens/s |\n| --- | --- | --- | --- |")
    for name, provider in providers(args.seq).items():
        model = provider.provide_distributed_model(wrap_with_ddp=False)[0]
        params = sum(p.numel() for p in model.parameters())
        step = time_steps(model, args.batch, args.seq, args.steps)
        print(f"| {name} | {params / 1e6:.2f} M | {step:.3f} | {args.batch * args.seq / step:,.0f} |")


if __name__ == "__main__":
    main()
