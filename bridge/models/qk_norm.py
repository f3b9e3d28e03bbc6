"""RMSNorm over a whole q or k projection (all heads together; OLMo 2's q_norm / k_norm), for the
q_layernorm / k_layernorm slots of Megatron-Core's attention, which hand over [..., heads, head_dim].

Under tensor parallelism each rank holds whole heads (its query groups), so the mean of squares is
the TP all-reduce of each rank's sum of squares over all num_heads * head_dim values; its backward
all-reduces the gradients too (every rank's output depends on every rank's sum). Each rank holds the
weight entries of its own heads (TP-sharded along dim 0, as the "column" mapping cuts HF's weight):
Megatron's local heads are the global heads rank * heads_per_rank onwards, in HF's order.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class _SumOverGroup(torch.autograd.Function):
    """All-reduce (sum) forward and backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ProjectionRMSNorm(torch.nn.Module):
    heads_field = ""  # the TransformerConfig field giving this projection's heads

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_ignored) -> None:
        super().__init__()
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel import set_tensor_model_parallel_attributes

        tp = parallel_state.get_tensor_model_parallel_world_size()
        heads = getattr(config, self.heads_field) or config.num_attention_heads
        if heads % tp:
            raise ValueError(f"{self.heads_field}={heads} is not divisible by the TP size {tp}")
        self.width = heads * hidden_size  # the whole projection
        self.eps = eps
        self.tp_group = parallel_state.get_tensor_model_parallel_group() if tp > 1 else None
        self.zero_centered_gamma = config.layernorm_zero_centered_gamma
        device = None if config.use_cpu_initialization else torch.cuda.current_device()
        init = torch.zeros if self.zero_centered_gamma else torch.ones
        self.weight = torch.nn.Parameter(
            init(heads // tp * hidden_size, device=device, dtype=config.params_dtype)
        )
        set_tensor_model_parallel_attributes(self.weight, is_parallel=True, dim=0, stride=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(*shape[:-2], shape[-2] * shape[-1]).float()
        squares = flat.pow(2).sum(-1, keepdim=True)
        if self.tp_group is not None:
            squares = _SumOverGroup.apply(squares, self.tp_group)
        normed = flat * torch.rsqrt(squares / self.width + self.eps)
        weight = self.weight.float() + 1 if self.zero_centered_gamma else self.weight.float()
        return (weight * normed).to(x.dtype).view(shape)  # OLMo 2 scales in fp32, then casts

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata=None):
        from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

        state = self.state_dict(prefix="", keep_vars=True)
        return make_sharded_tensors_for_checkpoint(state, prefix, {"weight": 0}, sharded_offsets)

    def extra_repr(self) -> str:
        return f"RMSNorm over the {self.heads_field} projection ({self.width}), eps={self.eps}"


class QueryProjectionRMSNorm(_ProjectionRMSNorm):
    heads_field = "num_attention_heads"


class KeyProjectionRMSNorm(_ProjectionRMSNorm):
    heads_field = "num_query_groups"
