"""bridge.inference.generate under TP=2 and PP=2 (2 gloo ranks): the TP=1 tokens, on every rank.

One launch: TP=1 (two replicas), TP=2 and PP=2 for one dense (llama) and one MoE (qwen3_moe) family,
greedy and seeded sampling; a 3-layer Llama on uneven PP=2 stages (2 + 1 layers); then
scripts/inference/generate.py --hf-path --pp 2 --json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tests.functional.launch import assert_ok, torchrun
from tests.functional.workers.convert_models import save_hf_model
from tests.functional.workers.generate_parallel import (
    CLI_ARGS,
    FAMILIES,
    LAYOUTS,
    NEW_TOKENS,
    PROMPT,
    UNEVEN_FAMILY,
)

WORKER = Path(__file__).parent / "workers" / "generate_parallel.py"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _hf_greedy(model, n: int) -> list[int]:
    prompt = torch.tensor([PROMPT])
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=n,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[0, len(PROMPT) :].tolist()


def _results(stdout: str) -> dict[tuple[str, str, str, int], list[int]]:
    # not anchored at a line start: another rank's unterminated output (a warning, a progress bar) can
    # precede a RESULT on its line
    found = re.finditer(r"RESULT (\S+) (\S+) (greedy|sampled) (\d) (\[[\d, ]*\])", stdout)
    return {(m[1], m[2], m[3], int(m[4])): json.loads(m[5]) for m in found}


def _json_line(stdout: str) -> dict:
    """The CLI's JSON line; raw_decode, since under load another rank's output can continue the line."""
    decoder = json.JSONDecoder()
    for line in reversed(stdout.splitlines()):
        start = line.find('{"ids"')
        if start >= 0:
            return decoder.raw_decode(line, start)[0]
    raise AssertionError(f"no JSON line in\n{stdout[-4000:]}")


def test_tp2_and_pp2_generate_the_tp1_tokens(tmp_path, tiny_hf):
    hf = {family: tiny_hf.link(family, tmp_path / "hf" / family) for family in FAMILIES}
    hf[UNEVEN_FAMILY] = save_hf_model("llama", tmp_path / "hf" / UNEVEN_FAMILY, seed=5, num_hidden_layers=3)
    out = assert_ok(torchrun(WORKER, 2, str(tmp_path), timeout=600))
    results = _results(out)
    for family in FAMILIES:
        reference = results[("tp1", family, "greedy", 0)]
        assert len(reference) == NEW_TOKENS
        assert reference == _hf_greedy(hf[family], NEW_TOKENS), family
        for kind in ("greedy", "sampled"):
            expected = results[("tp1", family, kind, 0)]
            for layout in LAYOUTS:
                for rank in (0, 1):
                    assert results[(layout, family, kind, rank)] == expected, (layout, family, kind, rank)
        # sampling really sampled: not the greedy tokens
        assert results[("tp1", family, "sampled", 0)] != reference, family
    # uneven stages: HF's greedy tokens and the TP=1 sampled ones, on both ranks
    assert results[("tp1", UNEVEN_FAMILY, "greedy", 0)] == _hf_greedy(hf[UNEVEN_FAMILY], NEW_TOKENS)
    for kind in ("greedy", "sampled"):
        for rank in (0, 1):
            got = results[("pp2_uneven", UNEVEN_FAMILY, kind, rank)]
            assert got == results[("tp1", UNEVEN_FAMILY, kind, 0)], (kind, rank)

    cli = _json_line(out)
    assert set(cli) == {"ids", "tokens_per_s"} and cli["tokens_per_s"] > 0
    n = int(CLI_ARGS[CLI_ARGS.index("--max-new-tokens") + 1])
    assert cli["ids"] == results[("tp1", "llama", "greedy", 0)][:n]
