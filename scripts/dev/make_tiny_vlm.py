"""A tiny random LLaVA (transformers' LlavaForConditionalGeneration: CLIP vision tower, MLP projector,
Llama language model) or Qwen2.5-VL (`--family qwen25_vl`: window-attention vision transformer and merger,
Qwen2 language model with M-RoPE) saved with its processor as one Hugging Face folder, and image-text
conversations (PIL-made PNG images) as JSONL; no downloads.

    python scripts/dev/make_tiny_vlm.py tiny_vlm --data vlm.jsonl images 8
    python scripts/dev/make_tiny_vlm.py tiny_qwen_vl --family qwen25_vl

Qwen2.5-VL's folder holds its tokenizer and image processor but no processor_config.json: transformers'
Qwen2_5_VLProcessor needs a video processor, which needs torchvision (`qwen25_vl_processor(folder)` builds
the processor without it).

The README's image-text finetune and the VLM tests use it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

WORDS = "the a cat dog bird sat on mat red blue green big small what is where yes no sky sea run fly tree sun moon".split()
# 7 specials + 25 words: a vocabulary of 32, which TP=2 splits without padding
SPECIALS = ["<unk>", "<pad>", "<eos>", "<|user|>", "<|assistant|>", "<|end|>", "<image>"]
# A turn is "<|role|> parts <|end|>"; an image part renders as the <image> placeholder, which the
# processor expands to the image's token count. Rendering a prefix of the conversation gives a prefix
# of the tokens (answer-only masking relies on it).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> "
    "{% if m['content'] is string %}{{ m['content'] }} {% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image> {% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endif %}"
    "<|end|> {% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
IMAGE_SIZE = 28  # pixels; CLIP patches of 7 -> 16 image tokens per image (CLS dropped)
TINY_VISION = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=IMAGE_SIZE,
    patch_size=7, projection_dim=32, layer_norm_eps=1e-5,
)  # fmt: skip
TINY_TEXT = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0,
)  # fmt: skip


def make_processor(out: Path):
    """A LlavaProcessor: a word-level tokenizer (specials, then WORDS) and CLIP's image processor at 28 px."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlavaProcessor, PreTrainedTokenizerFast
    from transformers.models.clip import CLIPImageProcessorPil  # PIL backend: no torchvision needed

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=SPECIALS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )
    images = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=images, tokenizer=fast, patch_size=TINY_VISION["patch_size"],
        vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE, image_token="<image>",
        num_additional_image_tokens=1,
    )  # fmt: skip
    processor.tokenizer.chat_template = CHAT_TEMPLATE
    processor.save_pretrained(out)
    return processor


def make_tiny_llava(out: Path, seed: int = 0):
    """A random LlavaForConditionalGeneration (fp32) and its processor in one Hugging Face folder."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    out = Path(out)
    processor = make_processor(out)
    vocab = len(processor.tokenizer)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**TINY_VISION),
        text_config=LlamaConfig(vocab_size=vocab, **TINY_TEXT),
        image_token_index=processor.tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=(IMAGE_SIZE // TINY_VISION["patch_size"]) ** 2,
    )
    config.dtype = torch.float32
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).float().eval()
    with torch.no_grad():  # every weight random (norms away from 1) so a mapping mistake shows
        for name, p in model.named_parameters():
            p.copy_(
                1.0 + 0.2 * torch.randn_like(p)
                if "norm" in name and p.ndim == 1
                else 0.1 * torch.randn_like(p)
            )
    model.save_pretrained(out)
    return model


# Qwen2.5-VL: its vision markers and placeholders, patches of 4 px merged 2x2; a 42 px image resizes
# to 32x32 (max_pixels 1024) -> an 8x8 patch grid -> 16 image tokens; windows of 16 px (2x2 merged
# patches) so the window-attention layer (block 0) differs from the full-attention one (block 1).
QWEN_SPECIALS = SPECIALS[:6] + [
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
QWEN_TEMPLATE = CHAT_TEMPLATE.replace("<image> ", "<|vision_start|> <|image_pad|> <|vision_end|> ")
TINY_QWEN_VISION = dict(
    depth=2, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4, spatial_merge_size=2,
    temporal_patch_size=2, window_size=16, fullatt_block_indexes=[1], out_hidden_size=64,
)  # fmt: skip


def make_qwen25_vl_processor(out: Path):
    """A Qwen2_5_VLProcessor: a word-level tokenizer with Qwen's vision tokens and Qwen2-VL's image
    processor (PIL backend) at 1024 pixels."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=QWEN_SPECIALS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )
    v = TINY_QWEN_VISION
    images = Qwen2VLImageProcessorPil(
        size={"shortest_edge": 256, "longest_edge": 1024}, patch_size=v["patch_size"],
        temporal_patch_size=v["temporal_patch_size"], merge_size=v["spatial_merge_size"],
    )  # fmt: skip
    fast.chat_template = QWEN_TEMPLATE
    fast.save_pretrained(out)  # the processor's parts (its own save needs the absent video processor)
    images.save_pretrained(out)
    return _without_video(Qwen2_5_VLProcessor, images, fast, QWEN_TEMPLATE)


def qwen25_vl_processor(folder: Path):
    """The Qwen2_5_VLProcessor of a folder make_tiny_qwen25_vl wrote (its tokenizer and image processor)."""
    from transformers import AutoTokenizer, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(folder)
    images = Qwen2VLImageProcessorPil.from_pretrained(folder)
    return _without_video(Qwen2_5_VLProcessor, images, tokenizer, tokenizer.chat_template)


def _without_video(cls, images, tokenizer, template: str):
    """The processor with no video processor (transformers' video processors need torchvision, which is
    not a dependency here): its __init__'s class check of the absent one is skipped. AutoProcessor cannot
    load such a folder, so dataset.kind=vlm cannot use it without torchvision."""
    check = cls.check_argument_for_proper_class
    cls.check_argument_for_proper_class = lambda self, name, arg: (
        None if arg is None else check(self, name, arg)
    )
    try:
        return cls(image_processor=images, tokenizer=tokenizer, video_processor=None, chat_template=template)
    finally:
        cls.check_argument_for_proper_class = check


def make_tiny_qwen25_vl(out: Path, seed: int = 0):
    """A random Qwen2_5_VLForConditionalGeneration (fp32) and its processor in one Hugging Face folder:
    M-RoPE sections [2, 3, 3] of the 16-wide heads."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out = Path(out)
    processor = make_qwen25_vl_processor(out)
    ids = processor.tokenizer.convert_tokens_to_ids
    text = dict(TINY_TEXT, vocab_size=len(processor.tokenizer), rope_theta=10000.0)
    text["rope_parameters"] = dict(
        rope_type="mrope", mrope_section=[2, 3, 3], rope_theta=text.pop("rope_theta")
    )
    config = Qwen2_5_VLConfig(
        vision_config=dict(TINY_QWEN_VISION),
        text_config=text,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    config.dtype = torch.float32
    return _randomized(Qwen2_5_VLForConditionalGeneration(config), seed, out)


def _randomized(model, seed: int, out: Path):
    """Every weight random (norms away from 1, so a mapping mistake shows); saved in fp32."""
    import torch

    torch.manual_seed(seed)
    model = model.float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(
                1.0 + 0.2 * torch.randn_like(p)
                if "norm" in name and p.ndim == 1
                else 0.1 * torch.randn_like(p)
            )
    model.save_pretrained(out)
    return model


MAKERS = {"llava": make_tiny_llava, "qwen25_vl": make_tiny_qwen25_vl}


def write_image(path: Path, rng) -> Path:
    """A PNG of random colored rectangles, IMAGE_SIZE * 1.5 pixels (the processor resizes it)."""
    from PIL import Image, ImageDraw

    size = IMAGE_SIZE * 3 // 2
    image = Image.new("RGB", (size, size), tuple(int(c) for c in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(3):
        x0, y0 = (int(v) for v in rng.integers(0, size - 8, 2))
        draw.rectangle([x0, y0, x0 + 8, y0 + 8], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    image.save(path)
    return path


def _sentence(rng, low: int = 2, high: int = 6) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(low, high))))


def write_vlm_jsonl(path: Path, image_dir: Path, n: int, seed: int = 0) -> list[dict]:
    """`n` records {"messages"}: a user turn with one image (a path relative to `path`'s folder) and a
    question, and an assistant answer, all random words."""
    rng = np.random.default_rng(seed)
    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        image = write_image(image_dir / f"{i}.png", rng)
        rel = str(image.resolve().relative_to(Path(path).resolve().parent))
        user = [{"type": "image", "image": rel}, {"type": "text", "text": _sentence(rng)}]
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": _sentence(rng)}]
        rows.append({"messages": messages})
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the Hugging Face folder to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", choices=sorted(MAKERS), default="llava")
    parser.add_argument(
        "--data", nargs=3, metavar=("JSONL", "IMAGE_DIR", "N"), help="also write N conversations"
    )
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    MAKERS[args.family](args.out, seed=args.seed)
    if args.data:
        write_vlm_jsonl(Path(args.data[0]), Path(args.data[1]), int(args.data[2]), seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
