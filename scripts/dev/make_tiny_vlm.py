"""A tiny random LLaVA (transformers' LlavaForConditionalGeneration: CLIP vision tower, MLP projector,
Llama language model), Gemma 3 (Gemma3ForConditionalGeneration: SigLIP tower, average-pooling projector,
Gemma 3 language model with a sliding-window and a global layer), Mistral 3 (`--family mistral3`: Pixtral
tower, patch merger, Ministral 3 language model) or Qwen2.5-VL (`--family qwen25_vl`: window-attention
vision transformer and merger, Qwen2 language model with M-RoPE) saved with its processor as one Hugging
Face folder, and image-text conversations (PIL-made PNG images) as JSONL; no downloads.

    python scripts/dev/make_tiny_vlm.py tiny_vlm --data vlm.jsonl images 8
    python scripts/dev/make_tiny_vlm.py tiny_gemma3_vlm --family gemma3
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
def chat_template(image_placeholder: str) -> str:
    return (
        "{% for m in messages %}<|{{ m['role'] }}|> "
        "{% if m['content'] is string %}{{ m['content'] }} {% else %}{% for c in m['content'] %}"
        f"{{% if c['type'] == 'image' %}}{image_placeholder} {{% else %}}{{{{ c['text'] }}}} {{% endif %}}"
        "{% endfor %}{% endif %}<|end|> {% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )


CHAT_TEMPLATE = chat_template("<image>")
IMAGE_SIZE = 28  # pixels; CLIP patches of 7 -> 16 image tokens per image (CLS dropped)
TINY_VISION = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=IMAGE_SIZE,
    patch_size=7, projection_dim=32, layer_norm_eps=1e-5,
)  # fmt: skip
TINY_TEXT = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0,
)  # fmt: skip


def word_tokenizer(specials: list[str], **extra):
    """A word-level fast tokenizer: `specials`, then WORDS."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=specials))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>", **extra
    )


def make_processor(out: Path):
    """A LlavaProcessor: a word-level tokenizer (specials, then WORDS) and CLIP's image processor at 28 px."""
    from transformers import LlavaProcessor
    from transformers.models.clip import CLIPImageProcessorPil  # PIL backend: no torchvision needed

    fast = word_tokenizer(SPECIALS)
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


def _randomize(model) -> None:
    """Every weight random (norms away from their identity) so a mapping mistake shows."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(
                1.0 + 0.2 * torch.randn_like(p)
                if "norm" in name and p.ndim == 1
                else 0.1 * torch.randn_like(p)
            )


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


# Gemma 3: its processor's image placeholder is the begin-of-image token, expanded to
# "\n\n<start_of_image>" + image tokens + "<end_of_image>\n\n" (the newlines split away here).
GEMMA3_SPECIALS = [
    *SPECIALS[:6],
    "<start_of_image>",
    "<image_soft_token>",
    "<end_of_image>",
    "<bos>",
    "<mask>",
]
GEMMA3_VISION = dict(
    model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=2, image_size=IMAGE_SIZE, patch_size=7, layer_norm_eps=1e-6,
)  # fmt: skip
# Layer 1 slides over 6 keys (shorter than a conversation, longer than an image's 4 tokens), layer 2 is
# global: both masks of Gemma 3 (causal or same-image, and that within the window) are exercised.
GEMMA3_TEXT = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=6,
    layer_types=["sliding_attention", "full_attention"],
    rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
)  # fmt: skip
GEMMA3_IMAGE_TOKENS = 4  # 4x4 patches average-pooled to 2x2


def make_tiny_gemma3(out: Path, seed: int = 0):
    """A random Gemma3ForConditionalGeneration (fp32) and its Gemma3Processor in one Hugging Face folder."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor
    from transformers.models.gemma3 import Gemma3ImageProcessorPil

    out = Path(out)
    names = {
        "boi_token": "<start_of_image>",
        "image_token": "<image_soft_token>",
        "eoi_token": "<end_of_image>",
    }
    fast = word_tokenizer(GEMMA3_SPECIALS, bos_token="<bos>", extra_special_tokens=names)
    template = chat_template("<start_of_image>")
    images = Gemma3ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = Gemma3Processor(
        image_processor=images, tokenizer=fast, chat_template=template, image_seq_length=GEMMA3_IMAGE_TOKENS
    )
    processor.tokenizer.chat_template = template
    processor.save_pretrained(out)
    ids = fast.convert_tokens_to_ids
    config = Gemma3Config(
        vision_config=GEMMA3_VISION,
        text_config=dict(model_type="gemma3_text", vocab_size=len(fast), **GEMMA3_TEXT),
        mm_tokens_per_image=GEMMA3_IMAGE_TOKENS,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
    )
    config.dtype = torch.float32
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config).float().eval()
    _randomize(model)
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


# Qwen3-VL: 16 px patches in the checkpoints, 4 here (images of ~32 x 32 px -> 8 x 8 patches -> 16 image
# tokens); DeepStack from vision block 0 into text layer 0; interleaved M-RoPE sections [2, 3, 3]
TINY_QWEN3_VISION = dict(
    depth=2, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4, spatial_merge_size=2,
    temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=64, deepstack_visual_indexes=[0],
)  # fmt: skip


def _make_qwen_processor(cls, out: Path, vision: dict):
    """A Qwen-VL processor `cls`: a word-level tokenizer with Qwen's vision tokens and Qwen2-VL's image
    processor (PIL backend; Qwen3-VL's checkpoints use it too) at 1024 pixels of the tower's patches."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=QWEN_SPECIALS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )
    images = Qwen2VLImageProcessorPil(
        size={"shortest_edge": 256, "longest_edge": 1024}, patch_size=vision["patch_size"],
        temporal_patch_size=vision["temporal_patch_size"], merge_size=vision["spatial_merge_size"],
    )  # fmt: skip
    fast.chat_template = QWEN_TEMPLATE
    fast.save_pretrained(out)  # the processor's parts (its own save needs the absent video processor)
    images.save_pretrained(out)
    return _without_video(cls, images, fast, QWEN_TEMPLATE)


def _load_qwen_processor(cls, folder: Path):
    """The Qwen-VL processor `cls` of a folder _make_tiny_qwen wrote (its tokenizer and image processor)."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(folder)
    images = Qwen2VLImageProcessorPil.from_pretrained(folder)
    return _without_video(cls, images, tokenizer, tokenizer.chat_template)


def qwen25_vl_processor(folder: Path):
    from transformers import Qwen2_5_VLProcessor

    return _load_qwen_processor(Qwen2_5_VLProcessor, folder)


def qwen3_vl_processor(folder: Path):
    from transformers import Qwen3VLProcessor

    return _load_qwen_processor(Qwen3VLProcessor, folder)


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


def _make_tiny_qwen(out: Path, seed: int, names: tuple[str, str, str], vision: dict, rope: dict, **text):
    """A random Qwen-VL model (`names`: its config, model and processor classes in transformers; fp32) and
    its processor in one Hugging Face folder."""
    import torch
    import transformers

    config_cls, model_cls, processor_cls = (getattr(transformers, n) for n in names)
    out = Path(out)
    processor = _make_qwen_processor(processor_cls, out, vision)
    ids = processor.tokenizer.convert_tokens_to_ids
    text = dict(TINY_TEXT, vocab_size=len(processor.tokenizer), **text)
    text["rope_parameters"] = dict(rope, rope_theta=text.pop("rope_theta"))
    config = config_cls(
        vision_config=dict(vision),
        text_config=text,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    config.dtype = torch.float32
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    _randomize(model)
    model.save_pretrained(out)
    return model


def make_tiny_qwen25_vl(out: Path, seed: int = 0):
    """A random Qwen2_5_VLForConditionalGeneration: M-RoPE sections [2, 3, 3] of the 16-wide heads."""
    names = ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor")
    rope = dict(rope_type="mrope", mrope_section=[2, 3, 3])
    return _make_tiny_qwen(out, seed, names, TINY_QWEN_VISION, rope)


def make_tiny_qwen3_vl(out: Path, seed: int = 0):
    """A random Qwen3VLForConditionalGeneration: interleaved M-RoPE sections [2, 3, 3] of the 16-wide
    heads, DeepStack into the first text layer."""
    names = ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", "Qwen3VLProcessor")
    rope = dict(rope_type="default", mrope_section=[2, 3, 3], mrope_interleaved=True)
    return _make_tiny_qwen(out, seed, names, TINY_QWEN3_VISION, rope, head_dim=16)


def make_tiny_qwen3_vl_moe(out: Path, seed: int = 0):
    """A random Qwen3VLMoeForConditionalGeneration: Qwen3-VL's tiny model with 4 experts of which 2 per
    token in every text layer (their gate / up halves stacked in one tensor per layer, saved in transformers'
    model layout [experts, 2 * 24, 64]; 2 * 24 and 24 differ from the width 64, so that a stacked tensor's
    shape tells its layout)."""
    names = ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration", "Qwen3VLProcessor")
    rope = dict(rope_type="default", mrope_section=[2, 3, 3], mrope_interleaved=True)
    # the router's auxiliary loss off (coefficient 0, which bridge reads): transformers adds it only with
    # output_router_logits, so finetuning compares the language-model loss alone
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, decoder_sparse_step=1,
               router_aux_loss_coef=0.0)  # fmt: skip
    return _make_tiny_qwen(out, seed, names, TINY_QWEN3_VISION, rope, head_dim=16, **moe)


MISTRAL3_SPECIALS = [*SPECIALS[:6], "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
# Pixtral: images resized to at most 42 px (keeping their aspect ratio) in multiples of 14 px (patches of 7
# merged 2 x 2): a square image is 3 x 3 image tokens, a 1.5-wide one 2 x 3, each row ended by a break.
PIXTRAL_VISION = dict(
    model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
    head_dim=16, image_size=42, patch_size=7, rope_theta=10000.0,
)  # fmt: skip
# Ministral 3's language model (ministral3): YaRN RoPE and Llama 4's query scale, over 8 original positions
# here (transformers' default: 16384) so that the scale departs from 1 within a test conversation.
MINISTRAL3_TEXT = dict(
    model_type="ministral3", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5, sliding_window=None,
    tie_word_embeddings=False,
    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                     "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1},
)  # fmt: skip


def pixtral_image_processor(folder: Path | None = None):
    """transformers' PIL Pixtral image processor at 42 px in 14-px steps (the folder's, when given)."""
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    if folder is not None:
        return PixtralImageProcessorPil.from_pretrained(str(folder))
    step = PIXTRAL_VISION["patch_size"] * 2  # patches merged 2 x 2
    return PixtralImageProcessorPil(
        size={"longest_edge": PIXTRAL_VISION["image_size"]}, patch_size={"height": step, "width": step}
    )


def pixtral_inputs(folder: Path, texts: list[str], images: list[list]) -> dict:
    """What PixtralProcessor makes of `texts` (one [IMG] placeholder per image) and their images, without
    it: transformers' PixtralProcessor imports torchvision, which this environment lacks. Its rule
    (processing_pixtral.replace_image_token): an image of h x w pixels becomes h / 14 rows of w / 14 [IMG]
    tokens, each row ended by [IMG_BREAK], the last by [IMG_END]; pixels and image_sizes are the image
    processor's."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    image_processor = pixtral_image_processor(folder)
    step = image_processor.patch_size["height"]
    flat = [image for sample in images for image in sample]
    pixels = image_processor(flat, return_tensors="pt")
    sizes = pixels["image_sizes"].tolist()
    expanded, k = [], 0
    for text in texts:
        parts = text.split("[IMG]")
        out = parts[0]
        for part in parts[1:]:
            h, w = sizes[k]
            rows = [" ".join(["[IMG]"] * (w // step) + ["[IMG_BREAK]"]) for _ in range(h // step)]
            out += " ".join(rows).rsplit("[IMG_BREAK]", 1)[0] + "[IMG_END]" + part
            k += 1
        expanded.append(out)
    tokens = tokenizer(expanded, padding=True, return_tensors="pt")
    return dict(tokens, pixel_values=pixels["pixel_values"], image_sizes=pixels["image_sizes"])


def make_tiny_mistral3(out: Path, seed: int = 0, tie: bool = False):
    """A random Mistral3ForConditionalGeneration (Pixtral tower, patch merger, Ministral 3 language model; fp32),
    its tokenizer (with the chat template) and Pixtral image processor in one Hugging Face folder (no
    processor_config.json: PixtralProcessor needs torchvision; see pixtral_inputs). `tie`: the output layer
    is the embedding (as Ministral 3 3B's)."""
    import torch
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    out = Path(out)
    fast = word_tokenizer(MISTRAL3_SPECIALS)
    fast.chat_template = chat_template("[IMG]")
    fast.save_pretrained(out)
    pixtral_image_processor().save_pretrained(out)
    config = Mistral3Config(
        vision_config=PIXTRAL_VISION,
        text_config=dict(MINISTRAL3_TEXT, vocab_size=len(fast), tie_word_embeddings=tie),
        image_token_index=fast.convert_tokens_to_ids("[IMG]"),
        spatial_merge_size=2,
        tie_word_embeddings=tie,
    )
    config.dtype = torch.float32
    torch.manual_seed(seed)
    model = Mistral3ForConditionalGeneration(config).float().eval()
    _randomize(model)
    model.save_pretrained(out)
    return model


MAKERS = {
    "llava": make_tiny_llava,
    "gemma3": make_tiny_gemma3,
    "mistral3": make_tiny_mistral3,
    "qwen25_vl": make_tiny_qwen25_vl,
    "qwen3_vl": make_tiny_qwen3_vl,
    "qwen3_vl_moe": make_tiny_qwen3_vl_moe,
}


def write_image(path: Path, rng, width_factor: float = 1.0) -> Path:
    """A PNG of random colored rectangles, IMAGE_SIZE * 1.5 pixels high and `width_factor` times that wide
    (the processor resizes it: Pixtral keeps the aspect ratio, the others crop)."""
    from PIL import Image, ImageDraw

    size = IMAGE_SIZE * 3 // 2
    image = Image.new("RGB", (int(size * width_factor), size), tuple(int(c) for c in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(3):
        x0, y0 = (int(v) for v in rng.integers(0, size - 8, 2))
        draw.rectangle([x0, y0, x0 + 8, y0 + 8], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    image.save(path)
    return path


def _sentence(rng, low: int = 2, high: int = 6) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(low, high))))


def write_vlm_jsonl(path: Path, image_dir: Path, n: int, seed: int = 0, wide: bool = False) -> list[dict]:
    """`n` records {"messages"}: a user turn with one image (a path relative to `path`'s folder) and a
    question, and an assistant answer, all random words. `wide`: every second image 1.5 times as wide
    (images of different sizes in one batch)."""
    rng = np.random.default_rng(seed)
    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        image = write_image(image_dir / f"{i}.png", rng, 1.5 if wide and i % 2 else 1.0)
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
