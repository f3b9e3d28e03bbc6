"""Synthetic image-text conversations (dataset.kind=mock_vlm): the shape of Megatron-Bridge's mock VLM data,
for runs that need no data files (its `*_pretrain_mock` vision-language recipes, throughput checks).

Conversation i is a user turn holding one image of uniformly random RGB bytes (IMAGE_SIZE) and the prompt
PROMPT, and an assistant answer of 10 to 29 words drawn from WORDS; a pure function of (dataset.seed, i).
They are rendered exactly as dataset.kind=vlm records (bridge.training.data.vlm: the model's processor and
chat template, loss on the answer). At most BASE_CONVERSATIONS are made and every split cycles through the
same ones (as Megatron-Bridge's base examples).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bridge.config.run_plan import DataPlan
from bridge.training.data.sft import pad_id
from bridge.training.data.vlm import Conversation, VLMDataset, load_processor, processed_samples

BASE_CONVERSATIONS = 1000
IMAGE_SIZE = (256, 256)  # width, height
PROMPT = "Describe this image."
ANSWER_WORDS = (10, 30)  # [low, high) words per answer
WORDS = (
    "a", "the", "image", "shows", "colour", "noise", "pixels", "bright", "dark", "red", "green", "blue",
    "pattern", "random", "texture", "grain", "square", "scene", "with", "and", "of", "small", "large",
    "many", "points", "mixed", "tones", "light", "shade", "field",
)  # fmt: skip


def mock_conversation(seed: int, index: int) -> Conversation:
    """Conversation `index` of the stream seeded by `seed`."""
    rng = np.random.default_rng([seed, index])
    width, height = IMAGE_SIZE
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    answer = " ".join(rng.choice(WORDS, size=int(rng.integers(*ANSWER_WORDS))))
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": Image.fromarray(pixels, mode="RGB")},
                {"type": "text", "text": PROMPT},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]
    return Conversation(where=f"mock_vlm conversation {index}", messages=messages, folder=Path("."))


def mock_conversations(count: int, seed: int) -> list[Conversation]:
    """The first min(count, BASE_CONVERSATIONS) conversations of the stream."""
    return [mock_conversation(seed, i) for i in range(min(int(count), BASE_CONVERSATIONS))]


def build_mock_vlm_datasets(data: DataPlan, tokenizer) -> list[torch.utils.data.Dataset | None]:
    """Train, valid and test datasets cycling through the same generated conversations."""
    processor = load_processor(tokenizer.path)
    conversations = mock_conversations(max(data.sample_counts), data.seed)
    samples = processed_samples(
        processor, conversations, data.seq_length, None, "mock_vlm", "model.seq_length"
    )
    pad = pad_id(tokenizer)
    return [
        VLMDataset(samples, n, data.seq_length, data.seed, pad) if n else None for n in data.sample_counts
    ]
