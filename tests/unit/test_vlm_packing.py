"""Packed image-text rows (dataset.kind=vlm with dataset.packed_sequence_size) against transformers' own
model on each conversation alone: three conversations (one image, two images of different sizes, no
image) packed into one row by bridge's packer, run through bridge's forward step (THD segments), give each
conversation's logits and per-token loss as LlavaForConditionalGeneration / Qwen2_5_VLForConditionalGeneration
give them on that conversation by itself; and the families that do not pack are refused before launch."""

from __future__ import annotations

import json

import pytest
import torch

from bridge.errors import ConfigError
from tests.functional.workers.vlm_models import load_processor, save_vlm_model, write_conversations
from tests.tolerances import logits_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
PACKED_FAMILIES = ("llava", "qwen25_vl", "qwen3_vl", "qwen3_vl_moe")


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


def _conversations(jsonl) -> list[list[dict]]:
    """One image; two images (of two sizes); none: each conversation's images end up in its own segment."""
    rows = [json.loads(line)["messages"] for line in jsonl.read_text().splitlines()]
    two = [dict(rows[1][0], content=[rows[1][0]["content"][0], *rows[2][0]["content"]]), rows[1][1]]
    text_only = [dict(rows[2][0], content=[rows[2][0]["content"][1]]), rows[2][1]]
    return [rows[0], two, text_only]


def _reference(hf, processor, folder, messages) -> tuple[torch.Tensor, dict]:
    """transformers on the conversation alone: its processor's inputs and the model's fp32 logits."""
    from PIL import Image

    images = [
        Image.open(folder / part["image"]).convert("RGB")
        for m in messages
        for part in (m["content"] if isinstance(m["content"], list) else ())
        if part["type"] == "image"
    ]
    text = processor.apply_chat_template(messages, tokenize=False)
    inputs = dict(processor(text=[text], images=images or None, return_tensors="pt"))
    with torch.no_grad():
        return hf(**inputs).logits[0].float(), inputs


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """family -> (HF model, bridge's model chunk, the packed dataset, [(messages, HF logits, HF inputs)])."""
    from bridge import AutoBridge
    from bridge.training.data.vlm import PackedVLMDataset, process_conversation

    out = {}
    for family in PACKED_FAMILIES:
        root = tmp_path_factory.mktemp(f"pack_{family}")
        hf = save_vlm_model(family, root / "hf").eval()
        jsonl = write_conversations(root / "data", 3, wide=True)
        processor = load_processor(root / "hf")
        conversations = _conversations(jsonl)
        refs = [(c, *_reference(hf, processor, jsonl.parent, c)) for c in conversations]
        size = sum(r[2]["input_ids"].shape[1] - 1 for r in refs) + 5  # one row and a padding segment
        samples = [
            process_conversation(processor, c, jsonl.parent, f"c{i}", size)
            for i, c in enumerate(conversations)
        ]
        data = PackedVLMDataset(samples, 1, size, seed=0, pad=processor.tokenizer.pad_token_id or 0)
        assert data.num_rows == 1
        provider = AutoBridge.from_hf_pretrained(root / "hf").to_megatron_provider()
        chunk = provider.provide_distributed_model(wrap_with_ddp=False)[0]
        out[family] = (hf, chunk, data, refs, provider.vlm_config)
    return out


def _segments(data) -> list[tuple[int, int, int]]:
    """(conversation index, start, end) of each member's tokens in row 0."""
    row = data.row(0)
    bounds = row["cu_seqlens"].tolist()
    return [(int(i), bounds[k], bounds[k + 1]) for k, i in enumerate(data.row_members(0))]


def _logits(chunk, batch, vocab: int, packed: bool = True, position_ids=None) -> torch.Tensor:
    from bridge.training.data.vlm import IMAGE_KEYS
    from bridge.training.forward_step import packed_seq_params

    extra = {"packed_seq_params": packed_seq_params(batch["cu_seqlens"])} if packed else {}
    images = {k: batch[k] for k in IMAGE_KEYS if k in batch}
    pos = batch["position_ids"] if position_ids is None else position_ids
    with torch.no_grad():
        return chunk(batch["tokens"], pos, None, images=images, **extra)[0, :, :vocab].float()


@pytest.mark.parametrize("family", PACKED_FAMILIES)
def test_packed_rows_give_each_conversations_logits_and_loss(family, packed):
    """fp32 both sides: logits within tests/tolerances.py's bound (the 2-layer language model computed
    with other kernels; measured 0.0-level). Per-token cross entropy = logsumexp(z) - z_label moves by at
    most 2 max|dz| (both terms are 1-Lipschitz in the max norm), so the loss bound is twice the logits'."""
    from bridge.training.data.vlm import PackedVLMDataset
    from bridge.training.forward_step import forward_step

    hf, chunk, data, refs, _ = packed[family]
    batch = PackedVLMDataset.collate([data.row(0)])
    vocab = hf.config.text_config.vocab_size
    logits = _logits(chunk, batch, vocab)
    with torch.no_grad():
        losses, _ = forward_step(iter([batch]), chunk)  # the training step: per-token losses [1, s]
    unpacked = _logits(chunk, batch, vocab, packed=False)  # one causal sequence: attention crosses segments
    images = 0
    for i, a, _ in _segments(data):
        _, ref, inputs = refs[i]
        ids = inputs["input_ids"][0]
        n = len(ids) - 1
        assert torch.equal(batch["tokens"][0, a : a + n], ids[:-1])
        bound = logits_tolerance(ref, hf.config)
        diff = (logits[a : a + n] - ref[:n]).abs().max().item()
        assert diff <= bound, f"{family} conversation {i}: max |logits - HF| = {diff} > {bound}"
        ref_loss = torch.nn.functional.cross_entropy(ref[:n], ids[1:], reduction="none")
        loss_diff = (losses[0, a : a + n] - ref_loss).abs().max().item()
        assert loss_diff <= 2 * bound, f"{family} conversation {i}: loss differs by {loss_diff}"
        assert batch["loss_mask"][0, a : a + n].sum() > 0
        if a > 0:  # a later segment: without the segment boundaries it attends to the earlier ones
            assert (unpacked[a : a + n] - ref[:n]).abs().max().item() > 100 * bound
        images += int("pixel_values" in inputs)
    end = _segments(data)[-1][2]  # the padding segment after the last member trains nothing
    assert images == 2 and end < batch["tokens"].shape[1] and batch["loss_mask"][0, end:].sum() == 0


def test_qwen25_vl_packed_positions_are_each_conversations_own(packed):
    """The M-RoPE ids the model computes for the packed row equal, segment by segment, transformers'
    get_rope_index on the conversation alone (each with its own image grids); computed over the whole
    row, a later conversation's ids continue the earlier ones' count and differ. (Its logits would not:
    under THD attention stays inside a segment and the whole-row ids shift each segment's by one constant
    on all three axes, which RoPE's relative angles cancel; measured 1.7e-6, within the bound.) With the
    row's 1D positions on all three axes instead of M-RoPE the logits move by O(1)."""
    from bridge.models.qwen25_vl.vision import position_ids
    from bridge.training.data.vlm import PackedVLMDataset

    hf, chunk, data, refs, vlm_config = packed["qwen25_vl"]
    batch = PackedVLMDataset.collate([data.row(0)])
    vocab = hf.config.text_config.vocab_size
    seen = []
    compute = chunk.positions
    chunk.positions = lambda *args, **kwargs: seen.append(compute(*args, **kwargs)) or seen[-1]
    try:
        _logits(chunk, batch, vocab)  # the model's own ids for the packed row
    finally:
        chunk.positions = compute
    (ours,) = seen
    whole = position_ids(vlm_config, batch["tokens"], {"image_grid_thw": batch["image_grid_thw"]})
    later_differs = False
    for i, a, _ in _segments(data):
        inputs = refs[i][2]
        ids = inputs["input_ids"]
        kinds = (ids == hf.config.image_token_id).int()
        ref, _ = hf.model.get_rope_index(ids, kinds, image_grid_thw=inputs.get("image_grid_thw"))
        n = ids.shape[1] - 1
        assert torch.equal(ours[:, 0, a : a + n], ref[:, 0, :n]), f"conversation {i}"
        later_differs |= not torch.equal(whole[:, 0, a : a + n], ref[:, 0, :n])
    assert later_differs
    flat = batch["position_ids"].unsqueeze(0).expand(3, -1, -1)  # 1D: each segment 0, 1, 2, ...
    i, a, _ = next(s for s in _segments(data) if "image_grid_thw" in refs[s[0]][2])
    _, ref, inputs = refs[i]
    n = inputs["input_ids"].shape[1] - 1
    moved = (_logits(chunk, batch, vocab, position_ids=flat)[a : a + n] - ref[:n]).abs().max().item()
    assert moved > 100 * logits_tolerance(ref, hf.config)  # measured 1.24


def _vlm_run(preset_name: str, **model_fields):
    """An image-text finetuning config packing rows of 256 tokens, with the preset's model."""
    from bridge.config.compose import compose
    from bridge.models import preset
    from recipes.llama_finetune import llama32_1b_sft_config

    overrides = ["dataset.kind=vlm", "dataset.data_paths=[x.jsonl]", "dataset.packed_sequence_size=256"]
    overrides += ["tokenizer.tokenizer_type=HuggingFaceTokenizer", "train.micro_batch_size=1"]
    cfg, _ = compose(llama32_1b_sft_config(), overrides=overrides)
    model = preset(preset_name)
    model.seq_length = cfg.model.seq_length
    for key, value in model_fields.items():
        setattr(model, key, value)
    cfg.model = model
    return cfg


@pytest.mark.parametrize(
    "preset_name, fields, match",
    [
        (
            "gemma3_4b_it",
            {},
            "refused for the gemma3_vl family: its language model runs bridge's soft-capped",
        ),
        ("mistral_small_31_24b", {}, "refused for the mistral3 family"),
        (
            "qwen25_vl_3b",
            {"apply_rope_fusion": True},
            "model.apply_rope_fusion = True: a packed row's M-RoPE",
        ),
        ("llava15_7b", {"context_parallel_size": 2}, "packed image-text rows under context parallelism"),
    ],
)
def test_families_that_do_not_pack_are_refused_before_launch(preset_name, fields, match):
    from bridge.config.finetune_rules import check_sft_data

    with pytest.raises(ConfigError, match=match):
        check_sft_data(_vlm_run(preset_name, **fields), cuda=True)


def test_packing_llava_and_qwen25_vl_passes_the_rules_with_micro_batch_one():
    from bridge.config.finetune_rules import check_sft_data

    for name in ("llava15_7b", "qwen25_vl_3b"):
        check_sft_data(_vlm_run(name), cuda=True)
    cfg = _vlm_run("llava15_7b")
    cfg.train.micro_batch_size = 2
    with pytest.raises(ConfigError, match="train.micro_batch_size = 2: with packed sequences"):
        check_sft_data(cfg, cuda=True)


def test_the_data_plan_builds_packed_rows_with_their_images(tmp_path):
    """build_vlm_datasets with dataset.packed_sequence_size: packed rows whose image tokens and images
    agree (LLaVA: each image is one pixel_values row and image_seq_length tokens); a conversation longer
    than the row names dataset.packed_sequence_size."""
    import types

    from bridge.config.run_plan import DataPlan
    from bridge.training.data.vlm import PackedVLMDataset, build_vlm_datasets

    folder = tmp_path / "hf"
    hf = save_vlm_model("llava", folder)
    jsonl = write_conversations(tmp_path / "data", 6, seed=3)
    tokenizer = types.SimpleNamespace(path=str(folder), pad=0, eod=2)

    def plan(size: int, samples: int) -> DataPlan:
        return DataPlan(
            kind="vlm", paths=(str(jsonl),), weights=None, split=(1.0, 0.0, 0.0), split_text="1,0,0",
            seq_length=128, seed=0, reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
            num_workers=0, cache_dir=None, sample_counts=(samples, 0, 0), packed_sequence_size=size,
        )  # fmt: skip

    train, _, _ = build_vlm_datasets(plan(96, 5), tokenizer)
    assert isinstance(train, PackedVLMDataset) and 1 < train.num_rows < 6
    per_image = hf.config.image_seq_length
    for r in range(train.num_rows):
        row = train.row(r)
        assert row["tokens"].shape == (96,) and row["cu_seqlens"][-1] == 96
        count = int((row["tokens"] == hf.config.image_token_id).sum())
        assert count == per_image * row["pixel_values"].shape[0] == per_image * len(train.row_members(r))
    with pytest.raises(ConfigError, match="image tokens run past dataset.packed_sequence_size=8"):
        build_vlm_datasets(plan(8, 5), tokenizer)
