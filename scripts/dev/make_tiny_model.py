"""Tiny local inputs for trying bridge without downloads: a word-level tokenizer with a chat template
(built with the `tokenizers` library), a random Llama of transformers' own class saved with it as one
Hugging Face folder, and SFT / chat JSONL files.

    python scripts/dev/make_tiny_model.py tiny_hf                       # the Hugging Face folder
    python scripts/dev/make_tiny_model.py tiny_hf --chat chat.jsonl 8   # and 8 chat records
    python scripts/dev/make_tiny_model.py tiny_hf --sft sft.jsonl 8     # and 8 input/output records

The README's generation and finetuning commands and the tests use it (tests/finetune_fixtures.py
re-exports these functions).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

WORDS = (
    "the a cat dog bird sat ran flew on under over mat log tree red blue green big small one two three "
    "four five what is where who why how yes no and or but then now here there sun moon star sky sea "
    "hill road car bus train fast slow hot cold"
).split()
SPECIALS = ["<unk>", "<pad>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
# Every turn is "<|role|> content <|end|>"; the generation prompt opens an assistant turn. Rendering a
# prefix of the conversation gives a prefix of the tokens (what answer-only masking relies on).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
TINY_LLAMA = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    rope_theta=10000.0,
)


def make_tokenizer(out: Path) -> Path:
    """A word-level tokenizer (ids: specials first, then WORDS) with CHAT_TEMPLATE, saved to `out`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=SPECIALS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return Path(out)


def make_tiny_llama(out: Path, seed: int = 0, **overrides) -> Path:
    """A random LlamaForCausalLM (fp32) and its tokenizer in one Hugging Face folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out)
    make_tokenizer(out)
    vocab = len(AutoTokenizer.from_pretrained(out))
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, **{**TINY_LLAMA, **overrides})
    config.dtype = torch.float32  # `dtype`, not the deprecated `torch_dtype`
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():  # norms away from 1 so a mapping mistake shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(out, safe_serialization=True)
    return out


def _sentence(rng, low: int = 2, high: int = 8) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(low, high))))


def write_sft_jsonl(path: Path, n: int, seed: int = 0) -> list[dict]:
    """`n` records {"input", "output"} of random words."""
    rng = np.random.default_rng(seed)
    rows = [{"input": _sentence(rng), "output": _sentence(rng)} for _ in range(n)]
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def write_chat_jsonl(path: Path, n: int, seed: int = 0, turns: int = 2) -> list[dict]:
    """`n` records {"messages"}: a system turn, then 1..turns user / assistant pairs of random words."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        messages = [{"role": "system", "content": _sentence(rng, 1, 4)}]
        for _ in range(int(rng.integers(1, turns + 1))):
            messages.append({"role": "user", "content": _sentence(rng)})
            messages.append({"role": "assistant", "content": _sentence(rng)})
        rows.append({"messages": messages})
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def write_preference_jsonl(path: Path, n: int, seed: int = 0) -> list[dict]:
    """`n` records {"prompt", "chosen", "rejected"} of random words (DPO's preference pairs)."""
    rng = np.random.default_rng(seed)
    rows = [
        {"prompt": _sentence(rng), "chosen": _sentence(rng), "rejected": _sentence(rng)} for _ in range(n)
    ]
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the Hugging Face folder to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chat", nargs=2, metavar=("PATH", "N"), help="also write N chat records")
    parser.add_argument("--sft", nargs=2, metavar=("PATH", "N"), help="also write N sft records")
    parser.add_argument("--preference", nargs=2, metavar=("PATH", "N"), help="also write N preference pairs")
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one tiny shard: a progress bar is noise
    make_tiny_llama(args.out, seed=args.seed)
    if args.chat:
        write_chat_jsonl(Path(args.chat[0]), int(args.chat[1]), seed=args.seed)
    if args.sft:
        write_sft_jsonl(Path(args.sft[0]), int(args.sft[1]), seed=args.seed)
    if args.preference:
        write_preference_jsonl(Path(args.preference[0]), int(args.preference[1]), seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
