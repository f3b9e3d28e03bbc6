"""Tiny random vision-language models (transformers' own classes) with their processors, PIL-made images
and the inputs the VLM tests feed them (scripts/dev/make_tiny_vlm.py makes the folders)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `import bridge`

import torch  # noqa: E402

_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "dev" / "make_tiny_vlm.py"


def tiny_vlm_script():
    name = "bridge_dev_make_tiny_vlm"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# family -> (config class, model class): the model types the VLM suites run over (one tiny folder each)
VLM_FAMILIES: dict[str, tuple[str, str]] = {
    "llava": ("LlavaConfig", "LlavaForConditionalGeneration"),
    "gemma3_vl": ("Gemma3Config", "Gemma3ForConditionalGeneration"),
    "mistral3": ("Mistral3Config", "Mistral3ForConditionalGeneration"),
}
MAKERS = {"llava": "make_tiny_llava", "gemma3_vl": "make_tiny_gemma3", "mistral3": "make_tiny_mistral3"}
# Families whose processors keep each image's size: their test conversations mix image sizes.
VARIABLE_SIZE = {"mistral3"}


def save_vlm_model(family: str, folder: str | Path, seed: int = 0) -> torch.nn.Module:
    return getattr(tiny_vlm_script(), MAKERS[family])(Path(folder), seed=seed)


def write_conversations(folder: str | Path, n: int, seed: int = 0, wide: bool = False) -> Path:
    """`n` image-text conversations (JSONL + PNGs) under `folder` (`wide`: images of two sizes); the JSONL path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tiny_vlm_script().write_vlm_jsonl(folder / "vlm.jsonl", folder / "images", n, seed=seed, wide=wide)
    return folder / "vlm.jsonl"


def image_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The processor outputs the vision side reads (VisionLanguageModel's `images`)."""
    return {k: batch[k] for k in ("pixel_values", "image_sizes") if k in batch}


def processed_batch(model_folder: str | Path, jsonl: str | Path, count: int = 2) -> dict[str, torch.Tensor]:
    """The first `count` conversations through the folder's processor (chat template + images), padded
    right: input_ids, attention_mask, pixel_values."""
    from PIL import Image
    from transformers import AutoProcessor, AutoTokenizer

    pixtral = json.loads((Path(model_folder) / "config.json").read_text())["model_type"] == "mistral3"
    # Mistral 3: PixtralProcessor needs torchvision; make_tiny_vlm.pixtral_inputs applies its rule
    processor = (AutoTokenizer if pixtral else AutoProcessor).from_pretrained(str(model_folder))
    rows = [json.loads(line) for line in Path(jsonl).read_text().splitlines()[:count]]
    texts, images = [], []
    for row in rows:
        texts.append(processor.apply_chat_template(row["messages"], tokenize=False))
        images.append([])  # each sample's images (Gemma 3's processor counts them per sample)
        for m in row["messages"]:
            for part in m["content"] if isinstance(m["content"], list) else ():
                if part["type"] == "image":
                    images[-1].append(Image.open(Path(jsonl).parent / part["image"]).convert("RGB"))
    if pixtral:
        return tiny_vlm_script().pixtral_inputs(Path(model_folder), texts, images)
    return dict(processor(text=texts, images=images, padding=True, return_tensors="pt"))
