"""The tiny finetuning inputs of scripts/dev/make_tiny_model.py (the script the README uses), re-exported
under the names the tests import."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dev" / "make_tiny_model.py"


def _load_script():
    name = "bridge_dev_make_tiny_model"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_tiny = _load_script()
WORDS = _tiny.WORDS
SPECIALS = _tiny.SPECIALS
CHAT_TEMPLATE = _tiny.CHAT_TEMPLATE
TINY_LLAMA = _tiny.TINY_LLAMA
make_tokenizer = _tiny.make_tokenizer
make_tiny_llama = _tiny.make_tiny_llama
write_sft_jsonl = _tiny.write_sft_jsonl
write_chat_jsonl = _tiny.write_chat_jsonl
