"""What the run will read, checked without torch or transformers, so `--dry-run` refuses what the run would
refuse: data files that are empty, a Hugging Face tokenizer folder that is missing or has no eos token,
NullTokenizer JSONL whose documents are not token ids.

validate_config runs these last (the config's own rules first). They read little: file sizes, a
tokenizer's small JSON files, and the first document of each JSONL file (the loader still reports a
bad line further down with its file and line).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from bridge.config import sections as S
from bridge.config.checks.data import blend_paths
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer

# Files of which a tokenizer folder holds at least one (fast, sentencepiece, BPE and WordPiece forms).
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
# Tokenizer classes with no default eos token: only the folder's files can give them one.
# (A model's own class, e.g. LlamaTokenizerFast, may bring a default one: it is not refused.)
GENERIC_TOKENIZER_CLASSES = (
    "PreTrainedTokenizerFast",
    "PreTrainedTokenizer",
    "TokenizersBackend",
    "PythonBackend",
    "SentencePieceBackend",
)
# The field the JSONL loader reads each document from (bridge.training.data.jsonl).
JSONL_TEXT_KEY = "text"


def check_data_files(cfg: ConfigContainer) -> None:
    check_data_not_empty(cfg)
    check_hf_tokenizer_folder(cfg)
    check_null_tokenizer_jsonl(cfg)


def data_files(cfg: ConfigContainer) -> list[tuple[str, list[str]]]:
    """Each dataset.data_paths entry with the files it stands for (an indexed prefix: its .bin and .idx)."""
    d = cfg.dataset
    if d.kind in S.GENERATED_DATA_KINDS or not d.data_paths:
        return []
    paths, _ = blend_paths(d.data_paths)
    return [(p, [p + ".bin", p + ".idx"] if d.kind == "indexed" else [p]) for p in paths]


def check_data_not_empty(cfg: ConfigContainer) -> None:
    for entry, files in data_files(cfg):
        for path in files:
            if os.path.isfile(path) and os.path.getsize(path) == 0:
                raise config_error(
                    "dataset.data_paths",
                    entry,
                    f"{path} is empty (0 bytes), so it holds no training data",
                    "give the finished file (scripts/data/preprocess_data.py writes .bin/.idx from JSONL), "
                    "or remove the entry from dataset.data_paths",
                )


# ---- Hugging Face tokenizer -----------------------------------------------------------------------


def check_hf_tokenizer_folder(cfg: ConfigContainer) -> None:
    """tokenizer.tokenizer_model is a local folder (or a hub name already in the Hugging Face cache:
    nothing is downloaded at run time) holding a tokenizer that declares an eos token, which the data
    loaders put between documents (bridge.training.data.tokenizer.HFTokenizer)."""
    t = cfg.tokenizer
    if t.tokenizer_type != "HuggingFaceTokenizer" or not t.tokenizer_model:
        return
    given = str(t.tokenizer_model)
    folder = given if os.path.isdir(given) else hub_cache_snapshot(given)
    if folder is None:
        rule = (
            "is a file, and a Hugging Face tokenizer is a folder"
            if os.path.isfile(given)
            else "does not exist (a local tokenizer folder, or a hub name already in the Hugging Face cache: "
            "nothing is downloaded at run time)"
        )
        raise config_error(
            "tokenizer.tokenizer_model", given, rule, "give the folder holding tokenizer_config.json"
        )
    if not any(os.path.isfile(os.path.join(folder, name)) for name in TOKENIZER_FILES):
        raise config_error(
            "tokenizer.tokenizer_model",
            given,
            f"the folder holds no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
            "give the folder a tokenizer was saved to (tokenizer.save_pretrained)",
        )
    if not _may_have_eos(folder):
        raise config_error(
            "tokenizer.tokenizer_model",
            given,
            "the tokenizer declares no eos token (neither tokenizer_config.json nor special_tokens_map.json "
            "names an eos_token), and the data loaders end every document with it",
            "give a tokenizer with an eos_token (set it in tokenizer_config.json)",
        )


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}  # absent or unreadable: transformers reports a broken file when it loads it
    return data if isinstance(data, dict) else {}


def _may_have_eos(folder: str) -> bool:
    """An eos token declared by the folder's files, or a model's own tokenizer class that may bring a
    default one (transformers' GPT2 / Llama classes do)."""
    config = _read_json(os.path.join(folder, "tokenizer_config.json"))
    special = _read_json(os.path.join(folder, "special_tokens_map.json"))
    if config.get("eos_token") or special.get("eos_token"):
        return True
    cls = config.get("tokenizer_class")
    if cls is None:  # transformers picks the class from config.json's model_type, when there is one
        return os.path.isfile(os.path.join(folder, "config.json"))
    return str(cls) not in GENERIC_TOKENIZER_CLASSES


def hub_cache_snapshot(name: str) -> str | None:
    """The cached snapshot folder of hub repository `name` ("org/model" or "model"), or None."""
    parts = name.split("/")
    if not 1 <= len(parts) <= 2 or not all(parts) or name.startswith((".", "~")):
        return None
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    cache = (
        os.environ.get("HF_HUB_CACHE")
        or os.environ.get("HUGGINGFACE_HUB_CACHE")
        or os.environ.get("TRANSFORMERS_CACHE")
        or os.path.join(home, "hub")
    )
    repo = os.path.join(cache, "models--" + "--".join(parts))
    try:
        with open(os.path.join(repo, "refs", "main"), encoding="utf-8") as f:
            revision = f.read().strip()
    except OSError:
        revision = ""
    snapshot = os.path.join(repo, "snapshots", revision) if revision else ""
    if snapshot and os.path.isdir(snapshot):
        return snapshot
    snapshots = os.path.join(repo, "snapshots")
    found = sorted(os.listdir(snapshots)) if os.path.isdir(snapshots) else []
    return os.path.join(snapshots, found[0]) if found else None


# ---- NullTokenizer JSONL --------------------------------------------------------------------------


def check_null_tokenizer_jsonl(cfg: ConfigContainer) -> None:
    """With the NullTokenizer, JSONL documents are whitespace-separated token ids within its vocabulary
    (ids 0..tokenizer.vocab_size, the last one its end-of-document id): the first document of each file
    is read."""
    if cfg.tokenizer.tokenizer_type != "NullTokenizer" or cfg.dataset.kind != "jsonl":
        return
    limit = cfg.tokenizer.vocab_size
    for entry, files in data_files(cfg):
        for path in files:
            found = _first_document(path)
            if found is None:
                raise config_error(
                    "dataset.data_paths",
                    entry,
                    f"{path} holds no documents (only blank lines)",
                    f'give JSONL with one {{"{JSONL_TEXT_KEY}": ...}} object per line, or remove the entry',
                )
            lineno, line = found
            problem = _null_tokenizer_problem(line, limit)
            if problem:
                raise config_error(
                    "dataset.data_paths",
                    entry,
                    f"{path}:{lineno} {problem}, and the NullTokenizer reads whitespace-separated token ids "
                    f"0..{limit} from each line's {JSONL_TEXT_KEY!r} field",
                    "write token ids into the data, or for text use tokenizer.tokenizer_type="
                    "HuggingFaceTokenizer with tokenizer.tokenizer_model=<folder>",
                )


def _first_document(path: str) -> tuple[int, str] | None:
    """(line number, line) of the first non-blank line of `path`, or None."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                return lineno, line
    return None


def _null_tokenizer_problem(line: str, limit: int | None) -> str | None:
    """What keeps `line` from being a NullTokenizer document, or None."""
    try:
        record = json.loads(line)
    except ValueError:
        return "is not JSON"
    text = record.get(JSONL_TEXT_KEY) if isinstance(record, dict) else None
    if not isinstance(text, str):
        return f"is not a JSON object with a {JSONL_TEXT_KEY!r} string"
    words = text.split()
    word = next((w for w in words if not (w.isascii() and w.isdigit())), None)
    if word is not None:
        return f"holds {word[:40]!r}, which is not a token id"
    if limit is not None:
        high = next((int(w) for w in words if int(w) > limit), None)
        if high is not None:
            return f"holds token id {high}, beyond the NullTokenizer's ids"
    return None
