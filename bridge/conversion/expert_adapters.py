"""Routed experts' adapters in a peft folder: one LoRA per expert projection, under the checkpoint's
per-expert names (`mlp.experts.<e>.gate_proj`, `up_proj`, `down_proj`, `target_modules` gate_proj / up_proj /
down_proj), the format Megatron-Bridge exports and transformers 4's MoE modules load as they are.

transformers 5 fuses a layer's experts into 3-D parameters (`mlp.experts.gate_up_proj`, `down_proj`); peft
(0.21) converts such an adapter when it loads it onto such a model (its `utils/transformers_weight_conversion.py`,
for the model types transformers maps to its Mixtral and Qwen2-MoE weight conversions: Qwen3-MoE, OLMoE,
GLM-4.5, DeepSeek, ERNIE 4.5 MoE, MiniMax-M2, ...): gate and up become one `target_parameters` LoRA of rank
2r with a block-diagonal B, down one of rank r, each holding every expert; the adapted weights are the same.
What that conversion cannot carry is refused before the export starts, on every rank:

- dropout and DoRA (peft's ParamWrapper refuses both);
- families whose checkpoint stacks the experts (GPT-OSS): no per-expert names to convert from;
- dense MLP layers adapted beside the experts (DeepSeek's first dense layers, Qwen3-MoE's mlp_only_layers):
  the conversion takes gate_proj / up_proj / down_proj out of `target_modules` for the fused experts, so
  peft would load the dense layers' MLPs without their adapters (measured with peft 0.21.2).
"""

from __future__ import annotations

from collections.abc import Iterable

Summary = tuple[tuple[str, ...], tuple[str, ...], str | None]  # expert leaves, other leaves, an expert name


def _leaf(name: str) -> str:
    # base_model.model.model.layers.0.mlp.experts.3.gate_proj.lora_A.weight -> gate_proj
    return name.rsplit(".lora_", 1)[0].rsplit(".", 1)[-1]


def summarize(hf_names: Iterable[str]) -> Summary:
    """What the check needs of one rank's adapter names (ranks exchange these, a few words each)."""
    names = list(hf_names)
    experts = [n for n in names if ".experts." in n]
    others = {_leaf(n) for n in names if ".experts." not in n}
    return tuple(sorted({_leaf(n) for n in experts})), tuple(sorted(others)), experts[0] if experts else None


def expert_export_problem(
    summaries: list[Summary], family_stacks_experts: bool, dropout: float, dora: bool
) -> str | None:
    """Why the model's expert adapters cannot be written for peft, or None (no expert adapters, or fine)."""
    expert_leaves = {leaf for s in summaries for leaf in s[0]}
    other_leaves = {leaf for s in summaries for leaf in s[1]}
    example = next((s[2] for s in summaries if s[2]), None)
    if example is None:
        return None
    attention_only = "adapt the attention only (peft.target_modules=[linear_qkv,linear_proj])"
    if family_stacks_experts:
        return (
            f"this family's checkpoint stacks its experts ({example} is a view of a stacked tensor) and peft "
            f"converts per-expert adapters only. Fix: export merged weights instead, or {attention_only}"
        )
    if dora or dropout:
        return (
            "peft loads expert adapters onto transformers' fused expert weights (target_parameters) without "
            f"{'DoRA' if dora else 'dropout'} (use_dora={dora}, lora_dropout={dropout}). Fix: train expert "
            f"adapters with peft.scheme=lora peft.dropout=0, export merged weights instead, or {attention_only}"
        )
    clash = sorted(expert_leaves & other_leaves)
    if clash:
        return (
            f"the model's dense MLP layers have adapters on {', '.join(clash)} beside the experts': peft's "
            "conversion onto transformers' fused experts takes those names out of target_modules, so peft would "
            f"load the dense layers without them. Fix: export merged weights instead, or {attention_only}"
        )
    return None
