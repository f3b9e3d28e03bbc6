"""The planner's vision activations (each family's `vision_size.activations`) against what autograd keeps:
the tensors transformers' own vision tower and projector save for the backward pass of one image (every
parameter trainable), counted by torch.autograd.graph.saved_tensors_hooks, one count per storage, the
parameters left out.

The formulas model each block's hidden- and intermediate-wide tensors; they leave out the norms' per-row
statistics and the attention's log-sum-exp (a few values per patch and layer against hundreds), so the
formula is within 10% of the count (measured on these tiny towers: 0.97x to 1.015x)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

from tests.functional.workers.vlm_models import processed_batch, save_vlm_model, write_conversations

IMAGE_KEYS = ("pixel_values", "image_grid_thw", "image_sizes")


def _saved_values(model, images: dict) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage().data_ptr()
        if key not in params and t.dtype.is_floating_point:
            seen[key] = max(seen.get(key, 0), t.untyped_storage().nbytes() // t.element_size())
        return t

    model.train().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model.get_image_features(**images)
    return sum(seen.values())


def _patches(family: str, cfg: dict, images: dict) -> int | None:
    """The image's patches where its size is not fixed by the config."""
    if "image_grid_thw" in images:
        return int(images["image_grid_thw"].prod(-1).sum())
    if family == "mistral3":
        h, w = images["image_sizes"][0].tolist()
        return (h // cfg["vision_config"]["patch_size"]) * (w // cfg["vision_config"]["patch_size"])
    return None


@pytest.mark.parametrize("family", ["llava", "gemma3_vl", "mistral3", "qwen25_vl", "qwen3_vl"])
def test_the_formula_counts_what_autograd_saves(family, tmp_path, monkeypatch):
    folder = tmp_path / "hf"
    if family == "qwen3_vl":
        sys.path.insert(0, str(Path(__file__).parents[1] / "functional" / "workers"))
        from tests.functional.workers.qwen3_vl_parity import inputs, make_model

        monkeypatch.setattr(torch.distributed, "get_rank", lambda: 0)  # the maker saves from rank 0
        monkeypatch.setattr(torch.distributed, "barrier", lambda: None)
        model = make_model(folder)
        batch = inputs()
        batch = {k: v[:1] if k == "image_grid_thw" else v for k, v in batch.items()}
        batch["pixel_values"] = batch["pixel_values"][: int(batch["image_grid_thw"].prod(-1).sum())]
    else:
        model = save_vlm_model(family, folder)
        batch = processed_batch(folder, write_conversations(tmp_path / "data", 1), 1)
    images = {k: v for k, v in batch.items() if k in IMAGE_KEYS}
    cfg = json.loads((folder / "config.json").read_text())
    sizes = importlib.import_module(f"bridge.models.{family}.vision_size")
    encoder, projector = sizes.activations(
        cfg, cfg["text_config"]["hidden_size"], _patches(family, cfg, images)
    )
    measured = _saved_values(model, images)
    assert abs(encoder + projector - measured) <= 0.1 * measured, (encoder + projector, measured)
