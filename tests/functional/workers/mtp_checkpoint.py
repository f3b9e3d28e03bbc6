"""A tiny DeepSeek-V3 / GLM-4.5 / GLM-4.7-Flash Hugging Face folder carrying multi-token-prediction layers, named as the
published checkpoints (DeepSeek-V3's model.safetensors.index.json: layer 61 of a 61-layer model).

transformers builds no MTP layer, so the folder is transformers' own model (save_pretrained) plus, for each
depth k, the tensors of layer num_hidden_layers + k: a full decoder layer (taken from the same architecture
built with more layers, so its names and shapes are transformers'), enorm, hnorm, eh_proj [hidden, 2 hidden],
shared_head.norm, and the copies of the embedding and output head the published checkpoints hold
(embed_tokens, shared_head.head).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.functional.workers.convert_models import make_hf_config, make_hf_model, save_hf_model

# the families whose checkpoints carry MTP layers Megatron-Core's MTP block computes: DeepSeek-V3's layout
# (num_nextn_predict_layers), and Qwen3-Next's mtp.* (OWN_LAYOUT below)
MTP_FAMILIES = ("deepseek_v3", "glm4_moe", "glm4_moe_lite", "qwen3_next")


def longer_overrides(config, depth: int) -> dict:
    """The config fields of `config`'s architecture built `depth` layers longer: its MTP layers are decoder
    layers of the last layer's kind (GLM-4.7-Flash lists each layer's MLP kind in mlp_layer_types)."""
    out = {"num_hidden_layers": config.num_hidden_layers + depth}
    for key in ("mlp_layer_types", "layer_types"):  # Qwen3-Next: the attention kind of each layer
        if getattr(config, key, None):
            out[key] = list(getattr(config, key)) + [getattr(config, key)[-1]] * depth
    return out


# Qwen3-Next's published checkpoints hold one MTP layer under mtp.* (vLLM's Qwen3NextMTP and Megatron-Bridge's
# Qwen3-Next bridge read these names) and no copy of the embedding or output head; config.json counts none.
QWEN3_NEXT_MTP = {
    "eh_proj.weight": "mtp.fc.weight",
    "enorm.weight": "mtp.pre_fc_norm_embedding.weight",
    "hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
    "shared_head.norm.weight": "mtp.norm.weight",
}
OWN_LAYOUT = ("qwen3_next",)  # the families whose MTP layer is not DeepSeek-V3's model.layers.<n + k>


def checkpoint_name(family: str, n: int, k: int, rest: str) -> str:
    """Where `family`'s checkpoint keeps tensor `rest` of MTP depth k (n: num_hidden_layers)."""
    if family == "qwen3_next":
        return QWEN3_NEXT_MTP.get(rest, f"mtp.layers.{k}.{rest}")
    return f"model.layers.{n + k}.{rest}"


def mtp_tensors(family: str, base: torch.nn.Module, depth: int, seed: int = 7) -> dict[str, torch.Tensor]:
    """The MTP layers' tensors for `base` (a transformers model of `family`), depth 0 .. depth - 1."""
    import tempfile

    from safetensors.torch import load_file

    n = base.config.num_hidden_layers
    longer = make_hf_model(family, seed=seed, **longer_overrides(base.config, depth))
    with tempfile.TemporaryDirectory() as tmp:  # the names as saved (transformers fuses experts in memory)
        longer.save_pretrained(tmp)
        state = load_file(f"{tmp}/model.safetensors")
    emb = base.model.embed_tokens.weight.detach().clone()
    head = base.lm_head.weight.detach().clone()
    hidden = base.config.hidden_size
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for k in range(depth):
        layer = f"model.layers.{n + k}."
        own = {name.removeprefix(layer): t for name, t in state.items() if name.startswith(layer)}
        own["enorm.weight"] = 1.0 + 0.2 * torch.randn(hidden, generator=g)
        own["hnorm.weight"] = 1.0 + 0.2 * torch.randn(hidden, generator=g)
        own["eh_proj.weight"] = 0.1 * torch.randn(hidden, 2 * hidden, generator=g)
        own["shared_head.norm.weight"] = 1.0 + 0.2 * torch.randn(hidden, generator=g)
        if family not in OWN_LAYOUT:
            own["shared_head.head.weight"] = head.clone()
            own["embed_tokens.weight"] = emb.clone()
        out |= {checkpoint_name(family, n, k, rest): t for rest, t in own.items()}
    return out


def save_mtp_folder(family: str, folder: str | Path, depth: int = 1) -> tuple[torch.nn.Module, dict]:
    """`family`'s tiny folder with `depth` MTP layers; (the transformers model, the MTP tensors)."""
    from safetensors.torch import load_file, save_file

    folder = Path(folder)
    base = save_hf_model(family, folder)
    extra = mtp_tensors(family, base, depth)
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    save_file({**tensors, **extra}, str(path), metadata={"format": "pt"})
    if family not in OWN_LAYOUT:
        config = json.loads((folder / "config.json").read_text())
        config["num_nextn_predict_layers"] = depth
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    assert make_hf_config(family).num_hidden_layers == base.config.num_hidden_layers
    return base, extra
