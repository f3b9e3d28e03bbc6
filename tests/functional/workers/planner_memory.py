"""4 ranks, TP=2 x PP=2 with sequence parallelism: the planner's per-rank memory vs what Megatron allocates.

Two tiny models under the same process groups: a Llama-style one with tied embeddings and a vocab that
needs padding (1000 -> 1024), and a Qwen3-MoE-style one (q/k norms, QKV bias, 4 experts, a shared
expert). Each is built by GPTModelProvider.provide_distributed_model in bf16 with Megatron-Core DDP
(fp32 gradient buffer). On every rank, for its pipeline stage:
- the parameters it holds (dense and expert, counted apart) equal bridge.parallel.param_count exactly;
- their bytes equal the `params` of bridge.parallel.memory.stage_memory;
- the DDP gradient buffers hold at least the planner's `grads` bytes and at most 1% more (bucket padding).
Prints one "RESULT {json}" line per rank and model.
"""

from __future__ import annotations

import json

import torch

from bridge.models import GPTModelProvider
from bridge.models.provider_layout import derive_layout
from bridge.parallel.memory import GB, TrainingSetup, stage_memory
from bridge.parallel.param_count import params_per_rank

COMMON = dict(
    hidden_size=64, num_attention_heads=4, num_query_groups=2, seq_length=32, normalization="RMSNorm",
    activation_func="silu", gated_linear_unit=True, add_bias_linear=False, position_embedding_type="rope",
    hidden_dropout=0.0, attention_dropout=0.0, bf16=True, params_dtype="bf16",
    tensor_model_parallel_size=2, pipeline_model_parallel_size=2, sequence_parallel=True,
)  # fmt: skip

MODELS = {
    "llama_tied": dict(num_layers=4, ffn_hidden_size=160, vocab_size=1000, share_embeddings_and_output_weights=True),
    "qwen3_moe_like": dict(
        num_layers=4, ffn_hidden_size=128, vocab_size=512, share_embeddings_and_output_weights=False,
        qk_layernorm=True, add_qkv_bias=True, num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=48,
        moe_shared_expert_intermediate_size=32, moe_token_dispatcher_type="allgather",
    ),
}  # fmt: skip


def is_expert(name: str) -> bool:
    # routed experts live under `mlp.experts.` (shared experts under `mlp.shared_experts.`)
    return ".experts." in name


def grad_buffer_bytes(chunks) -> int:
    total = 0
    for chunk in chunks:
        for buffer in [*chunk.buffers, *chunk.expert_parallel_buffers]:
            total += buffer.grad_data.numel() * buffer.grad_data.element_size()
    return total


def check(name: str, fields: dict) -> dict:
    from megatron.core import parallel_state

    provider = GPTModelProvider(**COMMON, **fields)
    chunks = provider.provide_distributed_model(wrap_with_ddp=True, ddp_config={"grad_reduce_in_fp32": True})
    shape = provider.model_shape()
    layout = derive_layout(provider, torch.distributed.get_world_size())
    stage = parallel_state.get_pipeline_model_parallel_rank()

    named = [(n, p) for chunk in chunks for n, p in chunk.named_parameters()]
    params = [p for _, p in named]
    real_dense = sum(p.numel() for n, p in named if not is_expert(n))
    real_expert = sum(p.numel() for n, p in named if is_expert(n))
    real_param_bytes = sum(p.numel() * p.element_size() for p in params)
    expected = params_per_rank(shape, layout, stage)  # the shape carries the provider's vocab padding
    est = stage_memory(shape, layout, TrainingSetup(seq_length=32, precision="bf16"), stage)
    result = {
        "model": name, "rank": torch.distributed.get_rank(), "stage": stage,
        "tp_rank": parallel_state.get_tensor_model_parallel_rank(),
        "real_dense": real_dense, "real_expert": real_expert, "est_dense": expected.dense,
        "est_expert": expected.expert, "real_param_bytes": real_param_bytes,
        "est_param_bytes": round(est.params * GB), "real_grad_bytes": grad_buffer_bytes(chunks),
        "est_grad_bytes": round(est.grads * GB), "dtypes": sorted({str(p.dtype) for p in params}),
    }  # fmt: skip
    assert (real_dense, real_expert) == (expected.dense, expected.expert), result
    assert real_param_bytes == result["est_param_bytes"], result
    assert result["est_grad_bytes"] <= result["real_grad_bytes"] <= 1.01 * result["est_grad_bytes"], result
    return result


def main() -> None:
    for name, fields in MODELS.items():
        result = check(name, fields)
        # Rank 0 prints every rank's result: lines printed by several ranks at once can interleave.
        results = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(results, result)
        if torch.distributed.get_rank() == 0:
            for r in results:
                print("RESULT " + json.dumps(r), flush=True)
    from bridge.parallel import runtime

    runtime.destroy_distributed()


if __name__ == "__main__":
    main()
