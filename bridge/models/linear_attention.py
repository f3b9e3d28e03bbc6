"""Gated DeltaNet layers in bridge's local GPT spec (experimental_attention_variant="gated_delta_net").

Megatron-Core builds a GPT block that mixes Gated DeltaNet (linear attention) and softmax-attention
layers with `get_transformer_block_with_experimental_attention_variant_spec`, which asserts Transformer
Engine (0.16.1, 0.19.x) and fuses the input norm into TE's norm+linear. bridge builds the same layers
from Megatron-Core's local modules instead, on CPU and CUDA alike: Megatron-Core's own `GatedDeltaNet`
(megatron.core.ssm.gated_delta_net) with a ColumnParallelLinear `in_proj`, a RowParallelLinear
`out_proj`, and the layer's separate input norm; layer i is Gated DeltaNet unless
(i + 1) % linear_attention_freq == 0 (Megatron-Core's rule for the integer form).

Its output norm (`out_norm`, an RMSNorm over each value head before the output gate) is a plain RMSNorm
whose weight is the scale itself, also when the model's other norms are zero-centred
(layernorm_zero_centered_gamma): the models that use it (Qwen3-Next, Qwen3.5) store it that way, so
their checkpoints load and export bit for bit. (Megatron-Core's TE spec builds it zero-centred, and
Megatron-Bridge subtracts 1 on import.)

Kernels: Megatron-Core's GatedDeltaNet takes its gated delta rule and L2 norm from `fla`
(flash-linear-attention). Without CUDA the CPU backend's plain-torch versions stand in
(bridge.parallel.cpu_kernels); with CUDA and no `fla`, the build stops with one ConfigError naming it.

Generation: Megatron-Core's GatedDeltaNet has no inference path; `RecurrentGatedDeltaNet` adds one that
carries each layer's convolution inputs and delta-rule state between steps (not recomputed over the
prefix), in the inference context's per-layer memory beside the attention layers' keys and values.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import sys

import torch

from bridge.errors import ConfigError
from bridge.models.norms import SequenceParallelNorm
from bridge.parallel import cpu_kernels


class GatedOutputNorm(SequenceParallelNorm):
    """The Gated DeltaNet output norm: RMSNorm with the scale stored as is (never zero-centred).

    Its weight (one value head's size) is shared by every head, and each tensor-parallel rank normalises
    its own heads, so its gradient is the sum over the TP group. Megatron-Core sums only q/k norm and
    sequence-parallel weights over TP (finalize_model_grads, 0.16.1 and 0.19.x): the weight enters the
    forward through copy_to_tensor_model_parallel_region (identity forward, all-reduce of the gradient),
    and is not marked sequence-parallel, so it is summed exactly once."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **kwargs) -> None:
        super().__init__(config, hidden_size, eps, normalization="RMSNorm")
        self.weight.sequence_parallel = False
        if self.zero_centered_gamma:
            self.zero_centered_gamma = False
            with torch.no_grad():
                self.weight.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from megatron.core.tensor_parallel.mappings import copy_to_tensor_model_parallel_region

        weight = copy_to_tensor_model_parallel_region(self.weight) if torch.is_grad_enabled() else self.weight
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, self.eps)


def linear_attention_layers(num_layers: int, freq: int) -> list[bool]:
    """Per layer: True for Gated DeltaNet, False for softmax attention (Megatron-Core's integer rule)."""
    return [(i + 1) % freq != 0 for i in range(num_layers)]


def check_mtp_layer(config) -> None:
    """Megatron-Core's MTP layer repeats the decoder's last layer spec: with Gated DeltaNet layers that
    must be a softmax-attention layer, as the MTP layers of hybrid checkpoints are (ConfigError else)."""
    if config.mtp_num_layers and linear_attention_layers(config.num_layers, config.linear_attention_freq)[-1]:
        raise ConfigError(
            f"model.mtp_num_layers={config.mtp_num_layers} with Gated DeltaNet: Megatron-Core's MTP layer "
            f"repeats the decoder's last layer, which num_layers={config.num_layers} and "
            f"linear_attention_freq={config.linear_attention_freq} make a Gated DeltaNet layer, while the "
            "MTP layer of a hybrid checkpoint uses softmax attention. Fix: a num_layers that is a multiple "
            "of linear_attention_freq (the last layer softmax), or model.mtp_num_layers=0"
        )


def ensure_kernels() -> None:
    """The gated delta rule's kernels: fla on CUDA (a ConfigError naming it when absent), the CPU
    backend's reference versions without CUDA."""
    if torch.cuda.is_available():
        if importlib.util.find_spec("fla") is None:
            raise ConfigError(
                "model.experimental_attention_variant = 'gated_delta_net': on CUDA, Megatron-Core's "
                "Gated DeltaNet runs the kernels of the `flash-linear-attention` package (import name "
                "`fla`), which is not installed. Fix: pip install flash-linear-attention"
            )
        return
    import megatron.core.ssm.gated_delta_net  # noqa: F401  (the module whose kernels are replaced)

    cpu_kernels.install_gated_delta_net_kernels()


class _NoExperimentalVariant:
    """Reads through to a TransformerConfig, except experimental_attention_variant (None): for
    get_gpt_decoder_block_spec, which asserts it is None (0.19.x) and builds the softmax layers."""

    experimental_attention_variant = None

    def __init__(self, config):
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name):
        return getattr(self._config, name)


def block_spec_config(config):
    """The config get_gpt_decoder_block_spec gets (the variant hidden while it builds softmax layers)."""
    if getattr(config, "experimental_attention_variant", None) == "gated_delta_net":
        return _NoExperimentalVariant(config)
    return config


def _stage_layer_ids(config, count: int, vp_stage: int | None) -> list[int]:
    """The global layer indices of this (virtual) pipeline stage's `count` layers, as Megatron-Core
    slices them (get_gpt_decoder_block_spec)."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    if config.pipeline_model_parallel_layout is not None:
        return list(
            config.pipeline_model_parallel_layout.get_layer_id_list(
                layer_type=LayerType.decoder, vp_stage=vp_stage
            )
        )
    offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
    return list(range(offset, offset + count))


@functools.cache
def recurrent_gated_delta_net() -> type:
    """Megatron-Core's GatedDeltaNet with a generation path: with an inference context (bridge.inference's
    static-batching generation) it keeps, per layer, the short convolution's last inputs and the delta
    rule's state, and runs only the new tokens from them (Megatron-Core's own raises "GDN does not
    support inference", 0.16.1 and 0.19.x). Training and plain forwards are Megatron-Core's forward."""
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet

    class RecurrentGatedDeltaNet(GatedDeltaNet):
        kernel_module = GatedDeltaNet.__module__  # where Megatron-Core bound its kernels

        def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
            context = kwargs.get("inference_context") or kwargs.get("inference_params")
            if context is None:
                return super().forward(hidden_states, attention_mask, *args, **kwargs)
            return _step(self, hidden_states, context)

    RecurrentGatedDeltaNet.__module__ = __name__
    RecurrentGatedDeltaNet.__qualname__ = "RecurrentGatedDeltaNet"
    return RecurrentGatedDeltaNet


def _delta_rule(gdn):
    """The chunked gated delta rule Megatron-Core's own forward calls: fla's, or without CUDA the
    stand-in bridge.parallel.cpu_kernels installed in its module."""
    return sys.modules[gdn.kernel_module].chunk_gated_delta_rule


def _step(gdn, hidden_states: torch.Tensor, context) -> tuple:
    """The new tokens of one sequence batch from the layer's cached state (none at offset 0: prefill),
    the same operations as Megatron-Core's forward (in_proj, causal conv, L2-normed q / k, gated delta
    rule, gated norm, out_proj), with the state carried."""
    tp = gdn.tp_size
    seq, batch, _ = hidden_states.shape
    qk, v_dim, heads = gdn.qk_dim // tp, gdn.v_dim // tp, gdn.num_value_heads // tp
    mixed, _ = gdn.in_proj(hidden_states)
    qkv, gate, beta, alpha = torch.split(mixed.transpose(0, 1), [2 * qk + v_dim, v_dim, heads, heads], dim=-1)
    key = ("gated_delta_net", gdn.layer_number)
    cache = context.key_value_memory_dict
    width = gdn.conv1d.weight.shape[-1]
    if context.sequence_len_offset == 0 or key not in cache:
        conv_state = qkv.new_zeros(batch, width - 1, qkv.shape[-1])
        state = None
    else:
        conv_state, state = cache[key]
    window = torch.cat([conv_state, qkv], dim=1)  # [b, width - 1 + s, channels]
    conv = torch.nn.functional.conv1d(
        window.transpose(1, 2), gdn.conv1d.weight, gdn.conv1d.bias, groups=window.shape[-1]
    )
    qkv = gdn.act_fn(conv).transpose(1, 2)  # [b, s, channels]: the causal conv of the new tokens
    q, k, v = torch.split(qkv, [qk, qk, v_dim], dim=-1)
    q = cpu_kernels.l2norm(q.reshape(batch, seq, -1, gdn.key_head_dim))
    k = cpu_kernels.l2norm(k.reshape(batch, seq, -1, gdn.key_head_dim))
    rep = gdn.num_value_heads // gdn.num_key_heads
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    v = v.reshape(batch, seq, -1, gdn.value_head_dim)
    g = -gdn.A_log.exp() * torch.nn.functional.softplus(alpha.float() + gdn.dt_bias)
    out, state = _delta_rule(gdn)(
        q.contiguous(), k.contiguous(), v.contiguous(), g=g, beta=beta.sigmoid(), initial_state=state,
        output_final_state=True,
    )  # fmt: skip
    cache[key] = (window[:, -(width - 1) :], state)
    normed = gdn._apply_gated_norm(out, gate.reshape(batch, seq, -1, gdn.value_head_dim))
    return gdn.out_proj(normed.reshape(batch, seq, -1).transpose(0, 1).contiguous())


def gated_delta_net_spec():
    """Megatron-Core's GatedDeltaNet on local modules (no input-norm fusion: the layer keeps its norm),
    with the generation path of recurrent_gated_delta_net."""
    from megatron.core.ssm.gated_delta_net import GatedDeltaNetSubmodules
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.spec_utils import ModuleSpec

    return ModuleSpec(
        module=recurrent_gated_delta_net(),
        submodules=GatedDeltaNetSubmodules(
            in_proj=ColumnParallelLinear, out_norm=GatedOutputNorm, out_proj=RowParallelLinear
        ),
    )


def with_gated_delta_net(block, config, vp_stage: int | None):
    """The local block spec with self_attention = GatedDeltaNet on the linear-attention layers."""
    ensure_kernels()
    linear = linear_attention_layers(config.num_layers, config.linear_attention_freq)
    ids = _stage_layer_ids(config, len(block.layer_specs), vp_stage)
    gdn = gated_delta_net_spec()
    swapped: dict[int, object] = {}
    layer_specs = []
    for spec, layer in zip(block.layer_specs, ids, strict=True):
        if not linear[layer]:
            layer_specs.append(spec)
            continue
        if id(spec) not in swapped:
            swapped[id(spec)] = dataclasses.replace(
                spec, submodules=dataclasses.replace(spec.submodules, self_attention=gdn)
            )
        layer_specs.append(swapped[id(spec)])
    return dataclasses.replace(block, layer_specs=layer_specs)


def mark_gated_delta_net_partitions(model) -> None:
    """megatron-core 0.16.1 marks the Gated DeltaNet's conv1d weight, A_log and dt_bias as
    tensor-parallel but gives them no partition_dim (0.19.x: 0, the head dimension they are split along):
    set it, so that the conversion and the checkpoint see how they are split."""
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet
    from megatron.core.tensor_parallel import set_tensor_model_parallel_attributes

    for module in model.modules():
        if not isinstance(module, GatedDeltaNet):
            continue
        for param in (module.conv1d.weight, module.conv1d.bias, module.A_log, module.dt_bias):
            if param is not None and not hasattr(param, "partition_dim"):
                del param.tensor_model_parallel  # set again, with its dimension, below
                set_tensor_model_parallel_attributes(param, is_parallel=True, dim=0, stride=1)
