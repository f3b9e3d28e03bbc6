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
    "qwen25_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
    "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration"),
}
# Vision-language families tested by their own suite only, not these (none today).
OWN_SUITE_VLM_FAMILIES: dict[str, tuple[str, str]] = {}
MAKERS = {
    "llava": "make_tiny_llava",
    "gemma3_vl": "make_tiny_gemma3",
    "mistral3": "make_tiny_mistral3",
    "qwen25_vl": "make_tiny_qwen25_vl",
    "qwen3_vl": "make_tiny_qwen3_vl",
    "qwen3_vl_moe": "make_tiny_qwen3_vl_moe",
}
# Families whose processors keep each image's size: their test conversations mix image sizes.
VARIABLE_SIZE = {"mistral3"}
# family -> the maker module's processor loader, where AutoProcessor cannot load the folder (Qwen2.5-VL's
# processor needs a video processor, which needs torchvision: not a dependency here)
PROCESSORS = {
    "qwen25_vl": "qwen25_vl_processor",
    "qwen3_vl": "qwen3_vl_processor",
    "qwen3_vl_moe": "qwen3_vl_processor",
}


def family_of(model_folder: str | Path) -> str:
    model_type = json.loads((Path(model_folder) / "config.json").read_text())["model_type"]
    return {"qwen2_5_vl": "qwen25_vl", "gemma3": "gemma3_vl"}.get(model_type, model_type)


def load_processor(model_folder: str | Path):
    from transformers import AutoProcessor

    family = family_of(model_folder)
    if family in PROCESSORS:
        return getattr(tiny_vlm_script(), PROCESSORS[family])(Path(model_folder))
    return AutoProcessor.from_pretrained(str(model_folder))


def save_vlm_model(family: str, folder: str | Path, seed: int = 0) -> torch.nn.Module:
    return getattr(tiny_vlm_script(), MAKERS[family])(Path(folder), seed=seed)


def write_conversations(folder: str | Path, n: int, seed: int = 0, wide: bool = False) -> Path:
    """`n` image-text conversations (JSONL + PNGs) under `folder` (`wide`: images of two sizes); the JSONL path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tiny_vlm_script().write_vlm_jsonl(folder / "vlm.jsonl", folder / "images", n, seed=seed, wide=wide)
    return folder / "vlm.jsonl"


def image_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The processor outputs the vision side reads (VisionLanguageModel's `images`), as forward_step passes them."""
    from bridge.training.data.vlm import IMAGE_KEYS

    return {k: batch[k] for k in IMAGE_KEYS if k in batch}


def processed_batch(model_folder: str | Path, jsonl: str | Path, count: int = 2) -> dict[str, torch.Tensor]:
    """The first `count` conversations through the folder's processor (chat template + images), padded
    right: input_ids, attention_mask, pixel_values (and the family's other processor outputs)."""
    from PIL import Image
    from transformers import AutoTokenizer

    pixtral = family_of(model_folder) == "mistral3"
    # Mistral 3: PixtralProcessor needs torchvision; make_tiny_vlm.pixtral_inputs applies its rule
    processor = AutoTokenizer.from_pretrained(str(model_folder)) if pixtral else load_processor(model_folder)
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


def hf_greedy(hf, inputs: dict, new_tokens: int) -> tuple[list[int], float]:
    """transformers' greedy ids after the prompt (EOS ignored) and the smallest top-2 logit gap over the
    steps (a gap well above the implementations' logit difference makes the greedy choice the same)."""
    with torch.no_grad():
        out = hf.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, eos_token_id=None,
                          pad_token_id=0, output_scores=True, return_dict_in_generate=True)  # fmt: skip
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    return out.sequences[0, inputs["input_ids"].shape[1] :].tolist(), min(gaps)
