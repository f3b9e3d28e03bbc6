"""Video inputs of the Qwen-VL families at TP=1 against transformers' own classes: a prompt with an image and
a two-frame video (Qwen2.5-VL: one video group, its temporal M-RoPE ids spaced by second_per_grid_ts;
Qwen3-VL: one group per frame, as its processor separates frames by timestamps, and DeepStack residuals at
both the image and the video tokens) gives transformers' logits; the same video with the temporal spacing
or the video features left out moves them (the comparison sees both); greedy generation from that prompt
equals transformers' `generate`, with and without the KV cache."""

from __future__ import annotations

import pytest
import torch

from tests.functional.workers.vlm_models import hf_greedy, save_vlm_model
from tests.tolerances import logits_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

GRID = [2, 4, 4]  # frames (temporal patches) x height x width patches; 2 x 2 merged -> 4 tokens a frame


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


def _inputs(config, family: str) -> dict[str, torch.Tensor]:
    """Words, an image of GRID's first frame size, words, then the video: one block of 8 video tokens
    (Qwen2.5-VL) or one block of 4 per frame with a word between (Qwen3-VL's timestamps), then words."""
    g = torch.Generator().manual_seed(3)
    v = config.vision_config
    merge, patch_values = v.spatial_merge_size, 3 * v.temporal_patch_size * v.patch_size**2
    special = max(
        config.image_token_id, config.video_token_id, config.vision_start_token_id, config.vision_end_token_id
    )
    vocab = config.text_config.vocab_size  # words: ids past the special tokens
    words = lambda n: torch.randint(special + 1, vocab, (n,), generator=g).tolist()  # noqa: E731
    per_frame = GRID[1] * GRID[2] // merge**2
    vs, ve = config.vision_start_token_id, config.vision_end_token_id
    ids = words(3) + [vs] + [config.image_token_id] * per_frame + [ve] + words(2)
    if family == "qwen3_vl":
        for _ in range(GRID[0]):
            ids += words(1) + [vs] + [config.video_token_id] * per_frame + [ve]
    else:
        ids += [vs] + [config.video_token_id] * (GRID[0] * per_frame) + [ve]
    ids += words(4)
    image_grid = torch.tensor([[1, GRID[1], GRID[2]]])
    video_grid = torch.tensor([GRID])
    out = {
        "input_ids": torch.tensor([ids]),
        "pixel_values": torch.randn(int(image_grid.prod()), patch_values, generator=g),
        "image_grid_thw": image_grid,
        "pixel_values_videos": torch.randn(int(video_grid.prod()), patch_values, generator=g),
        "video_grid_thw": video_grid,
    }
    if family == "qwen25_vl":
        out["second_per_grid_ts"] = torch.tensor(
            [2.0]
        )  # 2 s per temporal step: ids 2 * tokens_per_second apart
    return out


@pytest.mark.parametrize("family", ["qwen25_vl", "qwen3_vl"])
def test_video_logits_and_generation_match_transformers(family, tmp_path):
    from bridge import AutoBridge
    from bridge.inference.generate import generate

    hf = save_vlm_model(family, tmp_path / "hf", seed=2).eval()
    batch = _inputs(hf.config, family)
    ids = batch["input_ids"]
    kinds = (ids == hf.config.image_token_id).int() + 2 * (ids == hf.config.video_token_id).int()
    with torch.no_grad():
        ref = hf(**batch, mm_token_type_ids=kinds).logits.float()
    chunk = (
        AutoBridge.from_hf_pretrained(tmp_path / "hf")
        .to_megatron_provider(load_weights=True)
        .provide_distributed_model(wrap_with_ddp=False)[0]
        .eval()
    )
    visual = {k: v for k, v in batch.items() if k != "input_ids"}
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    vocab = ref.shape[-1]

    def ours(inputs: dict) -> torch.Tensor:
        with torch.no_grad():
            return chunk(ids, pos, None, images=inputs)[..., :vocab].float()

    bound = logits_tolerance(ref, hf.config)
    assert (ours(visual) - ref).abs().max().item() <= bound
    # the video's features at its tokens matter: zeroed frames move the logits
    blank = dict(visual, pixel_values_videos=torch.zeros_like(visual["pixel_values_videos"]))
    assert (ours(blank) - ref).abs().max().item() > 100 * bound
    if family == "qwen25_vl":  # and the temporal spacing of its M-RoPE ids
        spaced = dict(visual, second_per_grid_ts=torch.tensor([0.5]))
        assert (ours(spaced) - ref).abs().max().item() > 100 * bound
    # generation: the prompt's M-RoPE ids from its image and video, generated tokens continuing after them
    reference, gap = hf_greedy(hf, dict(batch, mm_token_type_ids=kinds), 6)
    assert gap > 1e-3  # far above the logits' difference: the greedy choices are the same
    # (a random model may emit a placeholder id, which a cache-less forward of the whole sequence would
    # take for an image or video token, in transformers as here: this seed's greedy ids hold none)
    assert not {hf.config.image_token_id, hf.config.video_token_id} & set(reference)
    for cache in (True, False):
        ids_out = generate([chunk], ids[0].tolist(), 6, vocab_size=vocab, kv_cache=cache, images=visual).ids
        assert ids_out == reference, cache
