"""PEFT settings (the run config's `peft` section): which adapters apply_peft attaches (pure data, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

PEFT_SCHEMES = ("lora", "dora")
# Megatron-Core module names a PEFT adapter attaches to by default (Megatron-Bridge's names; every target:
# bridge.peft.names.TARGETS, with in_proj / out_proj of Mamba-2 mixers and Gated DeltaNet)
PEFT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
# multi-latent attention's projections (it has no linear_qkv; linear_proj is its output projection)
MLA_PEFT_TARGETS = (
    "linear_q_proj",
    "linear_q_down_proj",
    "linear_q_up_proj",
    "linear_kv_down_proj",
    "linear_kv_up_proj",
)


@dataclass
class PeftConfig:
    """Parameter-efficient finetuning: low-rank adapters on the target linear layers, base weights frozen.

    Defaults are Megatron-Bridge's LoRA values (dim 32, alpha 32, no dropout, all four linear layers).
    """

    scheme: str | None = None  # None = train every weight | lora | dora
    target_modules: list[str] = field(default_factory=lambda: list(PEFT_TARGETS))
    dim: int = 32  # adapter rank r
    alpha: float = 32.0  # the adapter's output is scaled by alpha / dim
    dropout: float = 0.0  # dropout on the adapter's input
