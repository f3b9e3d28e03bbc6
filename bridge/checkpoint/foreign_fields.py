"""The model fields of a checkpoint written by Megatron-LM or Megatron-Bridge, as bridge's provider names them.

Pure Python (no torch): the callers hand over what they read from the checkpoint.

    Megatron-LM      the argparse Namespace saved as `args` in common.pt (its `--num-layers`, `--swiglu`,
                     `--untie-embeddings-and-output-weights`, ... as attributes)
    Megatron-Bridge  the `model:` section of its run_config.yaml: the provider's dataclass fields (the same
                     names as Megatron-Core's TransformerConfig and bridge's GPTModelProvider); torch objects
                     written as `{_target_: torch.nn.functional.silu, _call_: false}`

Only the architecture is taken (what fixes the tensors' shapes and the model's function): parallel sizes,
precision and fusion switches stay the run's own.
"""

from __future__ import annotations

from typing import Any

# The provider fields read from a checkpoint: the weights' shapes and the model's function.
ARCHITECTURE_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "normalization",
    "layernorm_epsilon",
    "gated_linear_unit",
    "activation_func",
    "add_bias_linear",
    "add_qkv_bias",
    "qk_layernorm",
    "share_embeddings_and_output_weights",
    "position_embedding_type",
    "rotary_base",
    "rotary_percent",
    "rotary_interleaved",
    "rope_scaling",
    "rope_scaling_factor",
    "vocab_size",
    "should_pad_vocab",
    "seq_length",
    "hidden_dropout",
    "attention_dropout",
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
)
# Megatron-LM's TP / PP sizes, which decide whether its optimizer state can follow a layout change
LAYOUT_ARGS = ("tensor_model_parallel_size", "pipeline_model_parallel_size")


def _arg(args: Any, name: str, default: Any = None) -> Any:
    if isinstance(args, dict):
        return args.get(name, default)
    return getattr(args, name, default)


def fields_from_megatron_lm_args(args: Any) -> dict[str, Any]:
    """Provider fields from Megatron-LM's saved `args` (megatron/training/arguments.py names). The
    vocabulary is the padded one the embedding was built with, taken as it is (should_pad_vocab=False)."""
    heads = _arg(args, "num_attention_heads")
    hidden = _arg(args, "hidden_size")
    swiglu = bool(_arg(args, "swiglu", False))
    squared_relu = bool(_arg(args, "squared_relu", False))
    groups = _arg(args, "num_query_groups") if _arg(args, "group_query_attention", False) else heads
    out = {
        "num_layers": _arg(args, "num_layers"),
        "hidden_size": hidden,
        "ffn_hidden_size": _arg(args, "ffn_hidden_size"),
        "num_attention_heads": heads,
        "num_query_groups": groups,
        "kv_channels": _arg(args, "kv_channels") or (hidden // heads if hidden and heads else None),
        "normalization": _arg(args, "normalization", "LayerNorm"),
        "layernorm_epsilon": _arg(args, "norm_epsilon"),
        "gated_linear_unit": swiglu,
        "activation_func": "silu" if swiglu else "squared_relu" if squared_relu else "gelu",
        "add_bias_linear": _arg(args, "add_bias_linear"),
        "add_qkv_bias": _arg(args, "add_qkv_bias"),
        "qk_layernorm": _arg(args, "qk_layernorm"),
        "share_embeddings_and_output_weights": not _arg(args, "untie_embeddings_and_output_weights", False),
        "position_embedding_type": _arg(args, "position_embedding_type"),
        "rotary_base": _arg(args, "rotary_base"),
        "rotary_percent": _arg(args, "rotary_percent"),
        "rotary_interleaved": _arg(args, "rotary_interleaved"),
        "rope_scaling": _arg(args, "use_rope_scaling"),
        "rope_scaling_factor": _arg(args, "rope_scaling_factor"),
        "vocab_size": _arg(args, "padded_vocab_size"),
        "should_pad_vocab": False,
        "seq_length": _arg(args, "seq_length"),
        "hidden_dropout": _arg(args, "hidden_dropout"),
        "attention_dropout": _arg(args, "attention_dropout"),
        "num_moe_experts": _arg(args, "num_experts"),
        "moe_router_topk": _arg(args, "moe_router_topk"),
        "moe_ffn_hidden_size": _arg(args, "moe_ffn_hidden_size"),
    }
    if out["num_moe_experts"] is None:  # a dense model: the router fields mean nothing
        out.pop("moe_router_topk")
        out.pop("moe_ffn_hidden_size")
    return {k: v for k, v in out.items() if v is not None}


def _plain(value: Any) -> Any:
    """`{_target_: torch.nn.functional.silu, _call_: false}` -> "silu"; `torch.bfloat16` -> "bf16"."""
    if isinstance(value, dict) and "_target_" in value:
        value = value["_target_"]
    if isinstance(value, str) and value.startswith(("torch.", "megatron.")):
        name = value.rsplit(".", 1)[-1]
        return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(name, name)
    return value


def fields_from_megatron_bridge_model(section: dict) -> dict[str, Any]:
    """Provider fields from the `model:` section of Megatron-Bridge's run_config.yaml. Fields it leaves
    None take the value Megatron-Core derives (kv_channels = hidden / heads, groups = heads,
    ffn = 4 x hidden); its vocabulary is padded at build time as bridge pads it (should_pad_vocab and
    make_vocab_size_divisible_by are taken with it)."""
    out = {name: _plain(section[name]) for name in ARCHITECTURE_FIELDS if name in section}
    hidden, heads = section.get("hidden_size"), section.get("num_attention_heads")
    if hidden and heads:
        if out.get("kv_channels") is None:
            out["kv_channels"] = hidden // heads
        if out.get("num_query_groups") is None:
            out["num_query_groups"] = heads
        if out.get("ffn_hidden_size") is None:
            out["ffn_hidden_size"] = 4 * hidden
    if "make_vocab_size_divisible_by" in section:
        out["make_vocab_size_divisible_by"] = section["make_vocab_size_divisible_by"]
    if out.get("num_moe_experts") is None:
        out.pop("moe_router_topk", None)
        out.pop("moe_ffn_hidden_size", None)
    return {k: v for k, v in out.items() if v is not None}


def saved_layout_sizes(source: Any) -> tuple[int, int] | None:
    """(TP, PP) the checkpoint was saved with: from Megatron-LM's args or Megatron-Bridge's model section."""
    tp, pp = (_arg(source, name) for name in LAYOUT_ARGS)
    return (int(tp), int(pp)) if tp is not None and pp is not None else None
