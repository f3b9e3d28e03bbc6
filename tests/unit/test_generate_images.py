"""Generation with images (scripts/inference/generate.py --image) at TP=1: greedy ids equal transformers'
LlavaForConditionalGeneration.generate on the same image and prompt, rendered by the folder's processor."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.functional.workers.vlm_models import hf_greedy, save_vlm_model, write_conversations

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
CLI_PATH = Path(__file__).resolve().parents[2] / "scripts" / "inference" / "generate.py"
PROMPT = "what is the cat on"
NEW_TOKENS = 12


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


@pytest.fixture(scope="module")
def cli():
    spec = importlib.util.spec_from_file_location("generate_cli_images", CLI_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_generate")
    hf = save_vlm_model("llava", root / "llava").eval()
    write_conversations(root / "data", 1)
    return root / "llava", hf, root / "data" / "images" / "0.png"


def _hf_greedy(folder: Path, hf, image: Path) -> tuple[list[int], float]:
    """transformers' greedy ids (EOS ignored) and the smallest top-2 logit gap over the steps."""
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(folder))
    content = [{"type": "image"}, {"type": "text", "text": PROMPT}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    inputs = processor(text=[text], images=[[Image.open(image).convert("RGB")]], return_tensors="pt")
    return hf_greedy(hf, dict(inputs), NEW_TOKENS)


@pytest.mark.parametrize("cache", [True, False])
def test_image_generation_equals_transformers_generate(cli, capsys, source, cache):
    folder, hf, image = source
    reference, gap = _hf_greedy(folder, hf, image)
    # fp32 logits equal transformers' to ~1e-6 (test_vlm_conversion): a top-2 gap above 1e-3 at every step
    # makes the greedy choice the same
    assert gap > 1e-3 and len(reference) == NEW_TOKENS
    argv = ["--hf-path", str(folder), "--image", str(image), "--prompt", PROMPT]
    argv += ["--max-new-tokens", str(NEW_TOKENS), "--ignore-eos", "--json"]
    assert cli.main(argv if cache else [*argv, "--no-kv-cache"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["ids"] == reference


def test_image_argument_errors(cli, capsys, source):
    folder, _, image = source
    base = ["--hf-path", str(folder), "--image"]
    assert cli.main([*base, str(image), "--prompt-ids", "1,2"]) == cli.EXIT_INVALID
    assert "goes with a --prompt text" in capsys.readouterr().err
    assert cli.main([*base, "missing.png", "--prompt", "hi"]) == cli.EXIT_INVALID
    assert "--image='missing.png': is not a file" in capsys.readouterr().err
