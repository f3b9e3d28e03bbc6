"""A row-parallel linear followed by a norm: the output norm of an attention or MLP branch (OLMo 2's
post_attention / post_feedforward norms, Gemma's sandwich norms), in the branch's linear_proj /
linear_fc2 slot since Megatron-Core's TransformerLayer has no norm after a branch.

The row-parallel output is whole after its all-reduce (or, with sequence parallelism, its reduce-
scatter to a slice of the sequence), so the norm over hidden is exact under TP and SP;
SequenceParallelNorm marks its weight for the TP all-reduce of gradients under SP.
"""

from __future__ import annotations

import functools


@functools.cache
def row_parallel_linear_with_post_norm() -> type:
    """Megatron-Core's RowParallelLinear whose output goes through `post_layernorm` (config.normalization)."""
    from megatron.core.tensor_parallel.layers import RowParallelLinear

    from bridge.models.norms import SequenceParallelNorm

    class RowParallelLinearWithPostNorm(RowParallelLinear):
        def __init__(self, input_size, output_size, *, config, **kwargs):
            super().__init__(input_size, output_size, config=config, **kwargs)
            self.post_layernorm = SequenceParallelNorm(config, output_size, eps=config.layernorm_epsilon)
            self._pre_norm_hooks: list = []

        def register_pre_norm_hook(self, hook) -> None:
            """`hook(module, args, kwargs, (output, bias))` -> (output, bias), run on the linear's own
            output before the norm, as a forward hook on a plain linear would (e.g. a LoRA adapter: the
            branch output the norm sees is W x + B A x)."""
            self._pre_norm_hooks.append(hook)

        def forward(self, input_, *args, **kwargs):
            result = super().forward(input_, *args, **kwargs)
            for hook in self._pre_norm_hooks:
                result = hook(self, (input_, *args), kwargs, result)
            output, bias = result
            if bias is not None:  # skip_bias_add: the norm needs the biased output
                output = output + bias
            return self.post_layernorm(output), None

    RowParallelLinearWithPostNorm.__module__ = __name__
    RowParallelLinearWithPostNorm.__qualname__ = "RowParallelLinearWithPostNorm"
    return RowParallelLinearWithPostNorm


def __getattr__(name: str):
    if name == "RowParallelLinearWithPostNorm":  # pickling by name, without importing Megatron-Core early
        return row_parallel_linear_with_post_norm()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
