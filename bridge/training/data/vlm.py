"""Image-text finetuning data (dataset.kind=vlm): conversations with images, through the model's own processor.

    {"messages": [{"role": "user", "content": [{"type": "image", "image": "img/0.png"},
                                               {"type": "text", "text": "what is this?"}]},
                  {"role": "assistant", "content": "a cat"}]}

Records come from JSON Lines files (one per line), .parquet files or datasets folders (one per row; read
by the `datasets` library as for SFT data). An image part gives its image as a path (relative to the
file's folder, or the dataset folder; or absolute), bytes, datasets' {"bytes", "path"} or a PIL image; a
part {"type": "image"} without one takes the record's next `images` entry (the layout of TRL's and
Hugging Face's VLM datasets). The text is the processor's chat
template; the processor (transformers' AutoProcessor of tokenizer.tokenizer_model, the HF folder) expands
each image's placeholder into its image tokens and makes the pixels. Loss on the assistant turns only:
assistant message i spans [len(render(messages[:i] + generation prompt)), len(render(messages[:i+1])))
tokens, each render processed with the images it holds. A malformed sample (not JSON, no messages, a
missing or unreadable image, image tokens past model.seq_length) is one ConfigError naming the file, its
line and the problem; with dataset.skip_malformed_samples=true each is left out instead and the count (and
the first reason) logged when the data is built. Samples are processed once, at build.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from bridge.config.checks.split_documents import SPLIT_NAMES, check_split_documents
from bridge.config.run_plan import DataPlan
from bridge.errors import ConfigError
from bridge.parallel.ranks import is_rank_zero
from bridge.training.data.packing import PackedDataset
from bridge.training.data.samples import EpochOrder, TokenizedSamples
from bridge.training.data.sft import pad_id, read_table
from bridge.training.data.splits import split_ranges
from bridge.training.logging import logger

HINT = (
    'each record (a JSON line, or a table row) is {"messages": [{"role": "user", "content": [{"type": "image", "image": "<path>"}, '
    '{"type": "text", "text": "..."}]}, {"role": "assistant", "content": "..."}]}'
)
IMAGE_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "image_sizes",
)  # processor outputs the model's vision side reads


@dataclass
class VLMSample:
    ids: np.ndarray  # the conversation's token ids, image placeholders expanded
    mask: np.ndarray  # 1 on the assistant tokens
    images: dict[str, torch.Tensor]  # the processor's image tensors (empty: a text-only sample)


class MalformedSample(ConfigError):
    """One conversation the reader cannot use (skipped and counted with dataset.skip_malformed_samples)."""


def _bad(where: str, what: str) -> MalformedSample:
    return MalformedSample(f"dataset.data_paths: {where}: {what}; {HINT}")


@dataclass(frozen=True)
class Conversation:
    """One record: where it is (file and line or row), its messages, the folder its image paths are
    relative to, and the record's own `images` column (for image parts that name no image)."""

    where: str
    messages: list[dict]
    folder: Path
    images: tuple = ()


def _checked_record(record: object, where: str) -> list[dict]:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise _bad(where, "has no non-empty 'messages' list")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), (str, list)):
            raise _bad(where, f"message {m!r:.60} has no 'role' / 'content' (a string or a list of parts)")
    return messages


def _checked_line(line: str, where: str) -> list[dict]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise _bad(where, f"is not JSON ({err})") from None
    return _checked_record(record, where)


def _without_nulls(value: object) -> object:
    """Arrow (parquet, datasets) gives every struct all the keys any row has, None where a row has none."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _table_records(path: str, cache_dir: str | None) -> list[tuple[str, object, tuple]]:
    """(where, record, its `images` column) per row of a .parquet file or a datasets folder."""
    table, _ = read_table(path, cache_dir)
    rows = len(next(iter(table.values()))) if table else 0
    out = []
    for r in range(rows):
        record = _without_nulls({k: col[r] for k, col in table.items()})
        images = record.pop("images", None) if isinstance(record, dict) else None
        out.append((f"{path}: row {r + 1}", record, tuple(images or ())))
    return out


def read_conversations(
    path: str, skipped: list[str] | None = None, cache_dir: str | None = None
) -> list[Conversation]:
    """The conversations of one dataset.data_paths entry: a JSON Lines file (one per line), a .parquet
    file or a datasets folder (save_to_disk, or a folder of data files; one per row), each checked for
    shape. A malformed one raises MalformedSample, or with `skipped` (a list) is left out and its error
    message appended to it."""
    if path.endswith(".jsonl"):
        folder = Path(path).resolve().parent
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        entries = [(f"{path}:{n}", line, ()) for n, line in enumerate(lines, 1) if line.strip()]
    else:
        folder = Path(path).resolve() if Path(path).is_dir() else Path(path).resolve().parent
        entries = _table_records(path, cache_dir)
    out = []
    for where, record, images in entries:
        try:
            messages = (
                _checked_line(record, where) if isinstance(record, str) else _checked_record(record, where)
            )
            out.append(Conversation(where, messages, folder, images))
        except MalformedSample as err:
            if skipped is None:
                raise
            skipped.append(str(err))
    return out


def _open_image(source: object, folder: Path, where: str) -> Image.Image:
    """An image given as a path (relative to `folder`), bytes, datasets' {"bytes", "path"} or a PIL image."""
    if isinstance(source, Image.Image):
        return source.convert("RGB")
    if isinstance(source, dict):  # datasets' Image feature, encoded
        source = source.get("bytes") or source.get("path")
    if isinstance(source, (bytes, bytearray)):
        try:
            with Image.open(io.BytesIO(source)) as image:
                return image.convert("RGB")
        except (UnidentifiedImageError, OSError) as err:
            raise _bad(where, f"image bytes cannot be read ({type(err).__name__}: {err})") from None
    if not isinstance(source, str):
        raise _bad(where, f"image {source!r:.60} is no path, bytes or image ('image': '<path>')")
    path = Path(source) if Path(source).is_absolute() else folder / source
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise _bad(where, f"image {str(path)!r} does not exist") from None
    except (UnidentifiedImageError, OSError) as err:
        raise _bad(where, f"image {str(path)!r} cannot be read ({type(err).__name__}: {err})") from None


def _images_of(messages: list[dict], folder: Path, where: str, listed: tuple = ()) -> list:
    """The conversation's images, opened in order: each image part's own (`image` or `path`), else the
    record's next `images` entry (a missing or unreadable one is a ConfigError)."""
    images = []
    pending = list(listed)
    for m in messages:
        for part in m["content"] if isinstance(m["content"], list) else ():
            if isinstance(part, dict) and part.get("type") == "video":
                raise _bad(
                    where,
                    "it holds a video part, and image-text data reads images only (the Qwen-VL models "
                    "take video inputs in Python, docs/vlm.md); give the frames as image parts",
                )
            if not isinstance(part, dict) or part.get("type") != "image":
                continue
            source = part.get("image") or part.get("path")
            if source is None:
                if not pending:
                    raise _bad(
                        where,
                        f"image part {part!r:.60} names no image ('image': '<path>'), and the record's "
                        f"'images' list has no image left for it ({len(listed)} given)",
                    )
                source = pending.pop(0)
            images.append(_open_image(source, folder, where))
    return images


def _unnamed_image_parts(messages: list[dict]) -> int:
    """The image parts that name no image of their own (they take the record's `images`, in order)."""
    return sum(
        1
        for m in messages
        for part in (m["content"] if isinstance(m["content"], list) else ())
        if isinstance(part, dict)
        and part.get("type") == "image"
        and not (part.get("image") or part.get("path"))
    )


def _process(
    processor, messages: list[dict], folder: Path, where: str, gen: bool = False, listed: tuple = ()
):
    images = _images_of(messages, folder, where, listed[: _unnamed_image_parts(messages)])
    try:
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        out = processor(text=[text], images=images or None, return_tensors="pt")
    except (ValueError, TypeError, KeyError) as err:
        raise _bad(where, f"the processor refuses it ({type(err).__name__}: {str(err)[:200]})") from None
    return out


def process_conversation(
    processor,
    messages: list[dict],
    folder: Path,
    where: str,
    seq_length: int,
    listed: tuple = (),
    limit: str = "model.seq_length",
) -> VLMSample:
    """One conversation's ids, assistant mask and image tensors (checked against `seq_length`, the
    field `limit` names: a packed row's length when packing). `listed`: the record's `images` column,
    for the image parts that name no image."""
    if len(listed) > _unnamed_image_parts(messages):
        raise _bad(
            where,
            f"its 'images' list holds {len(listed)} images and its messages {_unnamed_image_parts(messages)} "
            "image parts without an image of their own; give one {'type': 'image'} part per listed image",
        )
    full = _process(processor, messages, folder, where, listed=listed)
    ids = full["input_ids"][0].numpy().astype(np.int64)
    mask = np.zeros(len(ids), dtype=np.uint8)
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        head = _process(processor, messages[:i], folder, where, gen=True, listed=listed)["input_ids"][
            0
        ].numpy()
        end = _process(processor, messages[: i + 1], folder, where, listed=listed)["input_ids"][0].numpy()
        if not (np.array_equal(ids[: len(head)], head) and np.array_equal(ids[: len(end)], end)):
            raise _bad(
                where,
                "the chat template renders its first turns to tokens that are not a prefix of the whole",
            )
        mask[len(head) : len(end)] = 1
    image_id = getattr(processor, "image_token_id", None)
    if image_id is not None and len(ids) > seq_length + 1 and (ids[seq_length:] == image_id).any():
        raise _bad(
            where,
            f"its image tokens run past {limit}={seq_length} ({len(ids)} tokens with its "
            f"{int((ids == image_id).sum())} image tokens); raise {limit} or shorten the sample",
        )
    ids, mask = ids[: seq_length + 1], mask[: seq_length + 1]  # text past the limit is cut (right)
    if not mask[1:].any():
        raise _bad(where, f"no assistant token is left within {limit}={seq_length}")
    images = {k: full[k] for k in IMAGE_KEYS if k in full}
    return VLMSample(ids, mask, images)


class VLMDataset(torch.utils.data.Dataset):
    """One conversation per row, padded on the right to seq_length (loss mask 0 on the padding); its
    images ride along, concatenated over the micro batch by `collate`."""

    def __init__(self, samples: list[VLMSample], num_samples: int, seq_length: int, seed: int, pad: int):
        self.samples = samples
        self.num_samples = int(num_samples)
        self.seq_length = int(seq_length)
        self.pad = int(pad)
        self.order = EpochOrder(len(samples), seed)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        sample = self.samples[self.order(idx)]
        n, s = len(sample.ids) - 1, self.seq_length
        tokens = np.full(s, self.pad, dtype=np.int64)
        labels = np.full(s, self.pad, dtype=np.int64)
        loss_mask = np.zeros(s, dtype=np.float32)
        tokens[:n], labels[:n], loss_mask[:n] = sample.ids[:-1], sample.ids[1:], sample.mask[1:]
        row = {
            "tokens": torch.from_numpy(tokens),
            "labels": torch.from_numpy(labels),
            "loss_mask": torch.from_numpy(loss_mask),
            "position_ids": torch.arange(s, dtype=torch.int64),
        }
        return row | sample.images

    @staticmethod
    def collate(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return collate_image_rows(rows)


def concat_images(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The image tensors of several samples (one row per image each) concatenated in their order."""
    out = {}
    for key in IMAGE_KEYS:
        found = [p[key] for p in parts if key in p]
        if found:
            out[key] = torch.cat(found)
    return out


def collate_image_rows(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Token tensors stacked (a packed row's cu_seqlens too: [1, k + 1] at micro batch 1); image
    tensors (one row per image) concatenated in row order."""
    keys = ("tokens", "labels", "loss_mask", "position_ids", "cu_seqlens")
    return {k: torch.stack([r[k] for r in rows]) for k in keys if k in rows[0]} | concat_images(rows)


class PackedVLMDataset(PackedDataset):
    """Packed rows of image-text conversations (dataset.packed_sequence_size): the text packing itself
    (bridge.training.data.packing: best-fit over len(ids) - 1, segments in cu_seqlens), each row also
    carrying its members' images concatenated in member order (pixel_values, image_grid_thw /
    image_sizes one row per image), so the row's image tokens and image features stay in step."""

    def __init__(
        self,
        samples: list[VLMSample],
        num_samples: int,
        pack_size: int,
        seed: int,
        pad: int,
        pad_multiple: int = 1,
    ):
        lengths = np.array([len(s.ids) for s in samples], dtype=np.int64)
        offsets = np.zeros(len(samples) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokenized = TokenizedSamples(
            np.concatenate([s.ids for s in samples]), np.concatenate([s.mask for s in samples]), offsets
        )
        self.images = [s.images for s in samples]
        super().__init__(tokenized, num_samples, pack_size, seed, pad, pad_multiple)

    def row(self, r: int) -> dict[str, torch.Tensor]:
        return super().row(r) | concat_images([self.images[int(i)] for i in self.row_members(r)])

    @staticmethod
    def collate(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return collate_image_rows(rows)


def load_processor(path: str):
    """transformers' AutoProcessor of the model's HF folder (tokenizer.tokenizer_model)."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"tokenizer.tokenizer_model={path!r}: no Hugging Face processor there ({err}); image-text data "
            "(dataset.kind=vlm / mock_vlm) needs the model's processor (its HF folder)"
        ) from None


def build_vlm_datasets(data: DataPlan, tokenizer) -> list[torch.utils.data.Dataset | None]:
    """Train, valid and test datasets of image-text conversations (None where a split is not read)."""
    processor = load_processor(tokenizer.path)
    skipped: list[str] | None = [] if data.skip_malformed_samples else None
    pad = pad_id(tokenizer)
    records = [c for p in data.paths for c in read_conversations(p, skipped, data.cache_dir)]
    ranges = split_ranges(len(records), data.split)
    check_split_documents(", ".join(data.paths), ranges, data.sample_counts, data.split_text)
    row_length = data.packed_sequence_size or data.seq_length  # a sample's limit: its row
    limit = "dataset.packed_sequence_size" if data.packed_sequence_size else "model.seq_length"
    out: list[torch.utils.data.Dataset | None] = []
    for name, (begin, end), size in zip(SPLIT_NAMES, ranges, data.sample_counts, strict=True):
        if not size:
            out.append(None)
            continue
        samples = processed_samples(processor, records[begin:end], row_length, skipped, name, limit)
        if data.packed_sequence_size:
            dataset = PackedVLMDataset(
                samples, size, data.packed_sequence_size, data.seed, pad, data.pad_seq_to_mult
            )
            what = dataset.describe().replace("samples", "image-text conversations", 1)
        else:
            dataset = VLMDataset(samples, size, data.seq_length, data.seed, pad)
            what = f"{len(samples)} image-text conversations"
        if is_rank_zero():
            logger.log(logging.INFO, f"dataset ({name} split): {what}")
        out.append(dataset)
    if skipped is not None and is_rank_zero():
        first = f"; the first: {skipped[0]}" if skipped else ""
        logger.log(
            logging.WARNING if skipped else logging.INFO,
            f"dataset: skipped {len(skipped)} malformed image-text conversations "
            f"(dataset.skip_malformed_samples=true){first}",
        )
    return out


def processed_samples(
    processor, records: list, seq_length: int, skipped: list[str] | None, split: str, limit: str
) -> list:
    """The split's samples; a malformed one raises, or with `skipped` is left out and counted."""
    samples = []
    for c in records:
        try:
            samples.append(
                process_conversation(processor, c.messages, c.folder, c.where, seq_length, c.images, limit)
            )
        except MalformedSample as err:
            if skipped is None:
                raise
            skipped.append(str(err))
    if not samples:
        raise ConfigError(
            f"dataset.skip_malformed_samples=true: every conversation of the {split} split is malformed "
            f"({len(records)} skipped; the first: {skipped[0] if skipped else 'none'}). Fix: repair the data"
        )
    return samples
