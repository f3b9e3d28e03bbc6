"""Adapters as a Hugging Face PEFT folder: adapter_config.json + adapter_model.safetensors.

peft's names: `base_model.model.<HF module>.lora_A.weight`, `.lora_B.weight` and, for DoRA,
`.lora_magnitude_vector`. Fused Megatron linears are split exactly as their base weight is, by the
family's own mapping: B's rows (and DoRA's m) of linear_qkv go to q/k/v and those of linear_fc1 to
gate/up with the mapping of the base weight run on B's shape, and A (the same input) is written once
per part (Gated DeltaNet's in_proj: to in_proj_qkv / _z / _b / _a, or in_proj_qkvz / _ba; a Mamba-2
in_proj's [z; x; B; C; dt] blocks, each split over TP, back into HF's one in_proj). For row-parallel bases A's
columns are gathered like the base weight's. The bridge
Exporter does the TP gather and the PP transfer, so every rank calls these functions and rank 0 writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from bridge.checkpoint.atomic import atomic_dir, check_target_dir
from bridge.conversion.expert_adapters import expert_export_problem, summarize
from bridge.conversion.mappings import Mapping, make_mapping
from bridge.conversion.model_params import LocalParam, canonical_name, current_ranks, model_dims, resolve
from bridge.conversion.registry import Family, Rule
from bridge.errors import ConfigError
from bridge.parallel import ranks
from bridge.parallel.wrappers import unwrap
from bridge.peft.adapters import ParallelAdapter
from bridge.peft.apply import adapted_linears
from bridge.peft.names import SUFFIX

PREFIX = "base_model.model."  # peft's prefix of the wrapped model's module names
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
# column-parallel mappings an adapter's B (and DoRA's magnitude) follows; the *_packed ones are HF's fused
# qkv_proj / gate_up_proj (Phi-3), one peft module each; a Mamba-2 in_proj is one HF module whose rows are
# blocks each split over TP, a Gated DeltaNet in_proj two or four HF modules cut by head; the gated attention
# beside Gated DeltaNet holds its output gate's rows in q_proj
COLUMN_KINDS = ("column", "qkv", "gated_mlp", "qkv_packed", "gated_mlp_packed")
COLUMN_KINDS += ("mamba_in_proj", "gdn_in_proj", "gdn_in_proj_grouped", "qkv_gated")


def _adapter_params(
    adapter: ParallelAdapter, base: str, rule: Rule, mapping: Mapping, dims
) -> list[LocalParam]:
    """One adapter's tensors, each with the mapping that cuts it into peft's tensors."""
    modules = [PREFIX + h.removesuffix(".weight") for h in mapping.hf]
    a, m_param = adapter, getattr(adapter, "weight_magnitude", None)
    A, B = a.linear_in.weight, a.linear_out.weight
    if a.kind == "column":
        if mapping.kind not in COLUMN_KINDS:
            raise ConfigError(f"{base}: mapping kind {mapping.kind!r} for a column-parallel adapter")
        # (suffix, tensor, mapping kind, peft names, split over TP): one input, so A once per fused part
        plan = [(f"linear_in.weight@{m}", A, "replicated", [f"{m}.lora_A.weight"], False) for m in modules]
        plan.append(("linear_out.weight", B, mapping.kind, [f"{m}.lora_B.weight" for m in modules], True))
        if m_param is not None:
            names = [f"{m}.lora_magnitude_vector" for m in modules]
            plan.append(("weight_magnitude", m_param, mapping.kind, names, True))
    else:
        if mapping.kind != "row" or len(modules) != 1:
            raise ConfigError(f"{base}: mapping kind {mapping.kind!r} for a row-parallel adapter")
        (m,) = modules
        plan = [
            ("linear_in.weight", A, "row", [f"{m}.lora_A.weight"], True),
            ("linear_out.weight", B, "replicated", [f"{m}.lora_B.weight"], False),
        ]
        if m_param is not None:
            plan.append(("weight_magnitude", m_param, "replicated", [f"{m}.lora_magnitude_vector"], False))
    stem = base.removesuffix(".weight") + SUFFIX
    out = []
    for suffix, tensor, kind, names, sharded in plan:
        mp = make_mapping(kind, f"{stem}.{suffix}", tuple(names))
        rank, size = (a.tp_rank, a.tp_size) if sharded else (0, 1)
        out.append(LocalParam(mp.megatron, tensor, rule, mp, rank, size, dims))
    return out


def adapter_local_params(chunks: list, family: Family, hf_vocab_size: int) -> list[LocalParam]:
    """This rank's adapter tensors as LocalParams named for peft (several for a duplicated A)."""
    ranks_ = current_ranks()
    out: list[LocalParam] = []
    for chunk in chunks:
        model = unwrap(chunk)
        dims = model_dims(model, hf_vocab_size)
        for item in adapted_linears([model]):
            base = canonical_name(model, f"{item.name}.weight", ranks_)
            found = resolve(model, family, base)
            if found is None:
                raise ConfigError(f"{base}: no row in the {family.name} mapping table for an adapted weight")
            out += _adapter_params(item.adapter, base, *found, dims)
    return out


def _grad_of(lp: LocalParam) -> torch.Tensor:
    grad = getattr(lp.param, "main_grad", None)  # Megatron-Core DDP accumulates here
    if grad is None:
        grad = lp.param.grad
    return torch.zeros_like(lp.param) if grad is None else grad.detach().to(lp.param.dtype)


def _exporter(chunks: list, family: Family, hf_vocab_size: int, local_tensor: Callable | None = None):
    from bridge.conversion.weight_exporter import Exporter

    params = adapter_local_params(chunks, family, hf_vocab_size)
    return Exporter(
        chunks, family, hf_vocab_size, lambda _n, dtype: dtype, params=params, local_tensor=local_tensor
    )


def export_adapter_tensors(
    chunks: list, family: Family, hf_vocab_size: int, dst: int | None = None, grads: bool = False
) -> Iterator[tuple[str, torch.Tensor]]:
    """(peft name, full tensor) of every adapter, gathered over TP / PP: on every rank (dst=None) or on
    rank `dst` only. grads=True gives their gradients (main_grad under Megatron-Core DDP) instead."""
    exporter = _exporter(chunks, family, hf_vocab_size, _grad_of if grads else None)
    yield from exporter.iterate(dst=dst)


def adapter_settings(chunks: list) -> dict[str, Any]:
    """r, lora_alpha, lora_dropout, use_dora of the adapters (the same on every rank and layer)."""
    mine = {
        (a.dim, a.alpha, a.dropout, a.scheme == "dora")
        for a in (item.adapter for item in adapted_linears(chunks))
    }
    everyone = [mine]
    if torch.distributed.is_available() and torch.distributed.is_initialized() and ranks.world_size() > 1:
        everyone = [None] * ranks.world_size()
        torch.distributed.all_gather_object(everyone, mine)
    settings = set().union(*everyone)
    if len(settings) != 1:
        found = "no adapters" if not settings else f"different adapter settings {sorted(settings)}"
        raise ConfigError(f"save_hf_adapter: the model has {found}; attach them with bridge.peft.apply_peft")
    dim, alpha, dropout, dora = settings.pop()
    return {
        "r": dim,
        "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,
        "lora_dropout": dropout,
        "use_dora": dora,
    }


def adapter_config(settings: dict[str, Any], target_modules: list[str], base_model: str | None) -> dict:
    """adapter_config.json as peft's LoraConfig reads it."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        # absolute, so peft finds a local base from wherever the adapter is loaded (a Hub id stays as is)
        "base_model_name_or_path": (
            os.path.abspath(base_model)
            if base_model is not None and Path(base_model).exists()
            else base_model
        ),
        **settings,
        "target_modules": target_modules,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "use_rslora": False,
        "modules_to_save": None,
        "layers_to_transform": None,
        "layers_pattern": None,
        "rank_pattern": {},
        "alpha_pattern": {},
    }


def _target_modules(names: list[str]) -> list[str]:
    # base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight -> q_proj (first-seen order)
    seen: dict[str, None] = {}
    for name in names:
        if name.endswith(".lora_A.weight"):
            seen.setdefault(name.removesuffix(".lora_A.weight").rsplit(".", 1)[-1], None)
    return list(seen)


def _check_experts(chunks: list, family: Family, hf_vocab_size: int, settings: dict[str, Any]) -> None:
    """Refuse, on every rank, expert adapters peft cannot load (bridge.conversion.expert_adapters): the
    ranks exchange what their adapters name, as pipeline stages hold different layers."""
    mine = summarize(n for lp in adapter_local_params(chunks, family, hf_vocab_size) for n in lp.mapping.hf)
    everyone = [mine]
    if torch.distributed.is_available() and torch.distributed.is_initialized() and ranks.world_size() > 1:
        everyone = [None] * ranks.world_size()
        torch.distributed.all_gather_object(everyone, mine)
    problem = expert_export_problem(
        everyone, bool(family.stacked_experts), settings["lora_dropout"], settings["use_dora"]
    )
    if problem:
        raise ConfigError(f"save_hf_adapter: {problem}")


def _check_peft_refused(chunks: list, family: Family, hf_vocab_size: int) -> None:
    """Refuse, on every rank, adapters on HF modules peft will not load for this family (its mapping's
    PEFT_REFUSED_MODULES); pipeline stages hold different layers, so the ranks exchange what they found."""
    refused = dict(family.peft_refused_modules)
    if not refused:
        return
    names = (n for lp in adapter_local_params(chunks, family, hf_vocab_size) for n in lp.mapping.hf)
    mine = {n.split(".")[-3] for n in names if n.split(".")[-3] in refused}  # <module>.lora_A.weight
    everyone = [mine]
    if torch.distributed.is_available() and torch.distributed.is_initialized() and ranks.world_size() > 1:
        everyone = [None] * ranks.world_size()
        torch.distributed.all_gather_object(everyone, mine)
    found = sorted(set().union(*everyone))
    if found:
        raise ConfigError(
            f"save_hf_adapter: the model has adapters on {', '.join(found)} of {family.architectures[0]}: "
            + "; ".join(refused[m] for m in found)
            + ". Fix: export the merged weights (save_hf_pretrained / the merged export), or train without "
            f"{', '.join(found)} in peft.target_modules"
        )


def _peft_name(name: str, module_name: Callable[[str], str]) -> str:
    """base_model.model.<checkpoint module>.lora_A.weight -> the same under transformers' module name."""
    module, sep, tail = name.removeprefix(PREFIX).partition(".lora_")
    return PREFIX + module_name(module + ".weight").removesuffix(".weight") + sep + tail


def save_hf_adapter(
    chunks: list,
    path: str | Path,
    family: Family,
    hf_vocab_size: int,
    base_model: str | None = None,
    module_name: Callable[[str], str] | None = None,
) -> None:
    """Write the adapters as an HF PEFT folder at `path` (atomically: a hidden folder renamed when
    complete). Every rank calls it; rank 0 writes. `module_name`: checkpoint tensor name -> the name
    transformers' model class gives it (bridge.conversion.hf_module_names), which peft's keys follow."""
    from safetensors.torch import save_file

    target = check_target_dir(path, "path")  # every rank: all raise together
    settings = adapter_settings(chunks)
    _check_experts(chunks, family, hf_vocab_size, settings)  # every rank: all raise together
    _check_peft_refused(chunks, family, hf_vocab_size)
    exporter = _exporter(chunks, family, hf_vocab_size)
    if not ranks.is_rank_zero():
        for _ in exporter.iterate(dst=0):
            pass
        ranks.barrier()
        return
    # own storage for each tensor: a duplicated A is one tensor under several names
    rename = module_name or (lambda n: n)
    tensors = {
        _peft_name(name, rename): t.detach().to("cpu", copy=True).contiguous()
        for name, t in exporter.iterate(dst=0)
    }
    config = adapter_config(settings, _target_modules(list(tensors)), base_model)
    with atomic_dir(target, "path") as staging:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata={"format": "pt"})
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    ranks.barrier()
