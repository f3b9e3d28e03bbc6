"""CPU speed of the Gated DeltaNet reference kernels: a tiny 4-layer Gated DeltaNet model (Qwen3-Next's
layout: three Gated DeltaNet layers, one gated softmax-attention layer) against a GPT of the same size
(4 softmax-attention layers), in the same process, same sequence length and batch.

Both are Megatron-Core GPTModels built by bridge's provider; without CUDA the Gated DeltaNet layers run
bridge.parallel.cpu_kernels (the chunked gated delta rule, plain torch). A training step is forward,
backward and an AdamW step, in float32. Prints one table: tokens/s for forward only and for a training
step, and the ratio.

    PYTHONPATH=$PWD OMP_NUM_THREADS=2 python benchmarks/gated_delta_net_cpu.py [--seq 512] [--steps 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import time


def providers(seq: int):
    from bridge.models.gpt_provider import GPTModelProvider

    gpt = GPTModelProvider(
        num_layers=4, hidden_size=256, ffn_hidden_size=768, num_attention_heads=4, num_query_groups=2,
        kv_channels=64, vocab_size=1024, seq_length=seq, normalization="RMSNorm", activation_func="silu",
        gated_linear_unit=True, add_bias_linear=False, position_embedding_type="rope", qk_layernorm=True,
        hidden_dropout=0.0, attention_dropout=0.0, should_pad_vocab=False,
    )  # fmt: skip
    gdn = dataclasses.replace(
        gpt, layernorm_zero_centered_gamma=True, attention_output_gate=True, rotary_percent=0.25,
        experimental_attention_variant="gated_delta_net", linear_attention_freq=4, linear_conv_kernel_dim=4,
        linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
    )  # fmt: skip
    return {"gpt (4 softmax layers)": gpt, "gated deltanet (3 GDN + 1 gated softmax)": gdn}


def measure(provider, seq: int, batch: int, steps: int) -> dict[str, float]:
    import torch

    model = provider.provide()
    params = sum(p.numel() for p in model.parameters())
    toks = torch.randint(0, provider.vocab_size, (batch, seq))
    pos = torch.arange(seq).unsqueeze(0).expand(batch, -1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def forward():
        return model(toks, pos, attention_mask=None, labels=toks).mean()

    with torch.no_grad():
        forward()  # warm-up
        start = time.perf_counter()
        for _ in range(steps):
            forward()
        fwd = steps * batch * seq / (time.perf_counter() - start)
    forward().backward()  # warm-up
    opt.zero_grad()
    start = time.perf_counter()
    for _ in range(steps):
        forward().backward()
        opt.step()
        opt.zero_grad()
    train = steps * batch * seq / (time.perf_counter() - start)
    return {"params": params, "forward": fwd, "train": train}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    import torch

    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    runtime.initialize_distributed(ParallelLayout(world_size=1))
    results = {}
    for name, provider in providers(args.seq).items():
        torch.manual_seed(0)
        results[name] = measure(provider, args.seq, args.batch, args.steps)
    runtime.destroy_distributed()
    base = results["gpt (4 softmax layers)"]
    print(f"seq {args.seq}, batch {args.batch}, {args.steps} steps, torch threads {torch.get_num_threads()}")
    print(f"{'model':44} {'params':>9} {'fwd tok/s':>10} {'train tok/s':>12} {'train vs gpt':>13}")
    for name, r in results.items():
        print(
            f"{name:44} {r['params']:>9,} {r['forward']:>10,.0f} {r['train']:>12,.0f} "
            f"{r['train'] / base['train']:>12.2f}x"
        )


if __name__ == "__main__":
    main()
