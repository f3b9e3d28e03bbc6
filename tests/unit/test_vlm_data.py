"""Image-text conversations (dataset.kind=vlm) through the tiny LLaVA's own processor: ids and pixels equal
the processor's on the rendered conversation, loss on the assistant answer only, and each malformed sample
is one ConfigError naming its file and line."""

from __future__ import annotations

import json

import pytest
import torch

from bridge.errors import ConfigError
from tests.functional.workers.vlm_models import save_vlm_model, tiny_vlm_script, write_conversations


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_data")
    tiny_vlm_script().make_processor(root / "hf")  # the processor alone: no model needed here
    return root


@pytest.fixture(scope="module")
def processor(folder):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(folder / "hf"))


def _sample(processor, folder, messages, seq_length=64):
    from bridge.training.data.vlm import process_conversation

    return process_conversation(processor, messages, folder, "data.jsonl:3", seq_length)


def test_a_conversation_is_the_processors_render_with_loss_on_the_answer(processor, folder):
    from PIL import Image

    jsonl = write_conversations(folder / "ok", 1, seed=0)
    (row,) = [json.loads(line) for line in jsonl.read_text().splitlines()]
    sample = _sample(processor, jsonl.parent, row["messages"])
    image = Image.open(jsonl.parent / row["messages"][0]["content"][0]["image"]).convert("RGB")
    text = processor.apply_chat_template(row["messages"], tokenize=False)
    ref = processor(text=[text], images=[image], return_tensors="pt")
    assert sample.ids.tolist() == ref["input_ids"][0].tolist()
    assert torch.equal(sample.images["pixel_values"], ref["pixel_values"])
    answer = processor.tokenizer(
        row["messages"][1]["content"] + " <|end|>", add_special_tokens=False
    ).input_ids
    assert sample.ids[sample.mask.astype(bool)].tolist() == answer


def test_a_missing_or_unreadable_image_names_the_sample(processor, folder):
    messages = [
        {
            "role": "user",
            "content": [{"type": "image", "image": "nowhere.png"}, {"type": "text", "text": "cat"}],
        },
        {"role": "assistant", "content": "dog"},
    ]
    with pytest.raises(ConfigError, match=r"data.jsonl:3: image .*nowhere.png' does not exist"):
        _sample(processor, folder, messages)
    (folder / "broken.png").write_bytes(b"not a png")
    messages[0]["content"][0]["image"] = "broken.png"
    with pytest.raises(ConfigError, match=r"data.jsonl:3: image .*broken.png' cannot be read"):
        _sample(processor, folder, messages)


def test_image_tokens_past_the_sequence_length_name_the_sample(processor, folder):
    jsonl = write_conversations(folder / "long", 1, seed=1)
    (row,) = [json.loads(line) for line in jsonl.read_text().splitlines()]
    # 16 image tokens after the user marker: a limit of 8 cuts through them
    with pytest.raises(ConfigError, match=r"data.jsonl:3: its image tokens run past model.seq_length=8"):
        _sample(processor, jsonl.parent, row["messages"], seq_length=8)


def test_a_line_that_is_not_a_conversation_names_file_and_line(tmp_path):
    from bridge.training.data.vlm import read_conversations

    path = tmp_path / "bad.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"text": "no messages"}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: has no non-empty 'messages' list"):
        read_conversations(str(path))


def test_collate_concatenates_the_images_of_a_micro_batch():
    from bridge.training.data.vlm import VLMDataset

    rows = [
        {k: torch.zeros(4, dtype=torch.long) for k in ("tokens", "labels", "loss_mask", "position_ids")}
        | {"pixel_values": torch.full((n, 3, 2, 2), float(n))}
        for n in (1, 2)
    ]
    batch = VLMDataset.collate(rows)
    assert batch["tokens"].shape == (2, 4) and batch["pixel_values"][:, 0, 0, 0].tolist() == [1.0, 2.0, 2.0]


def test_vlm_data_needs_a_vision_language_model(tmp_path):
    from bridge.config.compose import compose
    from bridge.config.finetune_rules import check_sft_data
    from recipes.llama_finetune import llama32_1b_sft_config

    (tmp_path / "x.jsonl").write_text("")
    kind = ["dataset.kind=vlm", f"dataset.data_paths=[{tmp_path}/x.jsonl]", "dataset.packed_sequence_size=0"]
    cfg, _ = compose(llama32_1b_sft_config(), overrides=kind)
    with pytest.raises(ConfigError, match="dataset.kind = 'vlm'.*vision-language model"):
        check_sft_data(cfg, cuda=False)  # the plan's rule for finetuning data


@pytest.mark.usefixtures("single_process_groups")
@pytest.mark.parametrize(
    "family", ["llava", "qwen25_vl", "qwen3_vl", "qwen3_vl_moe", "gemma3_vl", "mistral3"]
)
def test_lora_adapter_logits_equal_the_merged_export(tmp_path, family):
    """bridge's LoRA on the language model exported both ways: peft's adapter on transformers' model equals
    the merged folder (fp32; the bound below). The adapter is keyed by transformers' module names (Qwen2.5-VL's
    checkpoint names `model.layers.*`, which peft does not rename, load nothing)."""
    import transformers
    from peft import PeftModel

    from bridge import AutoBridge
    from bridge.peft import apply_peft
    from bridge.peft.settings import PeftConfig
    from tests.functional.workers.vlm_models import VARIABLE_SIZE, VLM_FAMILIES, processed_batch

    hf = tmp_path / "hf"
    save_vlm_model(family, hf)
    data = write_conversations(tmp_path / "data", 2, wide=family in VARIABLE_SIZE)
    batch = processed_batch(hf, data, 2)
    bridge = AutoBridge.from_hf_pretrained(hf)
    chunks = bridge.to_megatron_provider().provide_distributed_model(wrap_with_ddp=False)
    # peft adapts nn.Linear modules: stacked experts (Qwen3-VL-MoE) take adapters on the attention only
    targets = {"target_modules": ["linear_qkv", "linear_proj"]} if family == "qwen3_vl_moe" else {}
    apply_peft(chunks, PeftConfig(scheme="lora", dim=4, alpha=8.0, **targets), seed=0)
    with torch.no_grad():  # B is zero at init: give the adapters values so the check can fail
        for name, p in chunks[0].named_parameters():
            if "adapter" in name or "lora" in name:
                p.copy_(0.1 * torch.randn_like(p))
    bridge.save_hf_pretrained(chunks, tmp_path / "merged")
    bridge.save_hf_adapter(chunks, tmp_path / "adapter")
    cls = getattr(transformers, VLM_FAMILIES[family][1])
    merged = cls.from_pretrained(tmp_path / "merged").eval()
    base = cls.from_pretrained(hf).eval()
    with torch.no_grad():
        before = base(**batch).logits
        adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()(**batch).logits
        ref = merged(**batch).logits
    assert (ref - before).abs().max() > 1e-2  # the adapters change the model
    # fp32: W + s*BA rounds once per weight, the adapter path adds s*B(Ax); through the tiny models' two
    # layers (norms, Gemma's embedding scale) that is tens of ulps of the largest logit: 64 ulps bound it
    ulp = torch.finfo(torch.float32).eps * ref.abs().max()
    assert (adapted - ref).abs().max() <= 64 * ulp, float((adapted - ref).abs().max() / ulp)


def test_context_and_sequence_parallelism_where_the_family_takes_them():
    """LLaVA takes CP and SP (both tested against transformers in tests/functional/test_vlm.py); Gemma 3's
    image-block attention mask refuses CP, in the provider and in the planner's layout alike."""
    from bridge.cli.plan import resolve_model
    from bridge.models import preset
    from bridge.parallel.layout import ParallelLayout

    q = preset("gemma3_4b_it")
    q.context_parallel_size = 2
    with pytest.raises(ConfigError, match="model.context_parallel_size = 2: context parallelism is refused for "
                                          "the gemma3_vl family: its image tokens attend"):  # fmt: skip
        q.finalize()
    for field, value in (("context_parallel_size", 2), ("sequence_parallel", True)):
        q = preset("llava15_7b")
        q.tensor_model_parallel_size = 2
        setattr(q, field, value)
        q.finalize()
    llava, defaults = resolve_model("llava15_7b")
    assert defaults == {}  # the planner may propose either
    ParallelLayout(world_size=4, tp=2, cp=2, sequence_parallel=True, model=llava)
    gemma, _ = resolve_model("gemma3_4b_it")
    with pytest.raises(ConfigError, match=r"cp \(model.context_parallel_size\) = 2: context parallelism is "
                                          "refused for this vision-language model: its image tokens"):  # fmt: skip
        ParallelLayout(world_size=2, cp=2, model=gemma)


def _plan(path, skip: bool, samples: int = 3):
    from bridge.config.run_plan import DataPlan

    return DataPlan(
        kind="vlm", paths=(str(path),), weights=None, split=(1.0, 0.0, 0.0), split_text="1,0,0",
        seq_length=48, seed=0, reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        num_workers=0, cache_dir=None, sample_counts=(samples, 0, 0), skip_malformed_samples=skip,
    )  # fmt: skip


def test_malformed_samples_are_one_error_or_skipped_and_counted(processor, folder, caplog):
    """dataset.skip_malformed_samples: off (default) the first malformed line is the error; on, the 3 good
    conversations of 7 are the dataset and the 4 others (not JSON, a missing image, an unreadable image,
    image tokens past model.seq_length) are counted in one log line."""
    import logging
    import types

    from bridge.training.data.vlm import build_vlm_datasets

    jsonl = write_conversations(folder / "mixed", 3, seed=2)
    good = [json.loads(line) for line in jsonl.read_text().splitlines()]
    (jsonl.parent / "broken.png").write_bytes(b"not a png")

    def with_images(*names):
        user = [{"type": "image", "image": n} for n in names] + [{"type": "text", "text": "cat"}]
        return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": "dog"}]}

    first_image = good[0]["messages"][0]["content"][0]["image"]
    bad = [
        "{not json",
        with_images("nowhere.png"),
        with_images("broken.png"),
        with_images(*[first_image] * 3),
    ]
    lines = [json.dumps(good[0]), bad[0], json.dumps(bad[1]), json.dumps(good[1]), json.dumps(bad[2])]
    lines += [json.dumps(bad[3]), json.dumps(good[2])]  # 3 images: 48 image tokens, past seq_length 48
    jsonl.write_text("\n".join(lines) + "\n")
    tokenizer = types.SimpleNamespace(path=str(folder / "hf"), pad=1, eod=2)
    with pytest.raises(ConfigError, match=r"vlm.jsonl:2: is not JSON"):
        build_vlm_datasets(_plan(jsonl, skip=False), tokenizer)
    with caplog.at_level(logging.INFO):
        (train, valid, test) = build_vlm_datasets(_plan(jsonl, skip=True), tokenizer)
    assert valid is None and test is None and len(train.samples) == 3
    assert [s.ids.tolist() for s in train.samples] == [
        _sample(processor, jsonl.parent, g["messages"], 48).ids.tolist() for g in good
    ]
    (line,) = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert "skipped 4 malformed image-text conversations" in line and "vlm.jsonl:2: is not JSON" in line
    jsonl.write_text("\n".join([bad[0], json.dumps(bad[1])]) + "\n")  # nothing left to train on
    with pytest.raises(ConfigError, match="every conversation of the train split is malformed"):
        build_vlm_datasets(_plan(jsonl, skip=True, samples=1), tokenizer)


def test_skip_malformed_samples_is_for_image_text_data_only(tmp_path):
    from bridge.config.compose import compose
    from bridge.config.finetune_rules import check_sft_data
    from recipes.llama_finetune import llama32_1b_sft_config

    cfg, _ = compose(llama32_1b_sft_config(), overrides=["dataset.skip_malformed_samples=true"])
    with pytest.raises(ConfigError, match="dataset.skip_malformed_samples = True.*dataset.kind=vlm"):
        check_sft_data(cfg, cuda=False)


def _as_parts(messages: list[dict]) -> list[dict]:
    """Every message's content as a list of parts (Arrow needs one type per column)."""
    return [m | {"content": m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]}
            for m in messages]  # fmt: skip


def test_parquet_files_and_datasets_folders_give_the_jsonl_samples(processor, folder):
    """The same conversations as JSON Lines (image paths), as a .parquet file (image bytes in the parts),
    and as a datasets save_to_disk folder (parts {"type": "image"} and an `images` column of paths, TRL's
    layout): equal ids, masks and pixels."""
    import datasets

    from bridge.training.data.vlm import process_conversation, read_conversations

    src = write_conversations(folder / "formats", 3, seed=2)
    rows = [{"messages": _as_parts(json.loads(line)["messages"])} for line in src.read_text().splitlines()]
    jsonl = src.parent / "parts.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def image_part(part: dict, how: str) -> dict:
        if part["type"] != "image":
            return part
        return (
            {"type": "image", "image": (src.parent / part["image"]).read_bytes()}
            if how == "bytes"
            else {"type": "image"}
        )

    def converted(how: str) -> list[dict]:
        out = []
        for r in rows:
            messages = [m | {"content": [image_part(p, how) for p in m["content"]]} for m in r["messages"]]
            named = [p["image"] for m in r["messages"] for p in m["content"] if p["type"] == "image"]
            listed = [str(src.parent / name) for name in named]  # absolute: the folder is elsewhere
            out.append({"messages": messages} | ({"images": listed} if how == "listed" else {}))
        return out

    datasets.Dataset.from_list(converted("bytes")).to_parquet(str(src.parent / "bytes.parquet"))
    datasets.Dataset.from_list(converted("listed")).save_to_disk(str(src.parent / "listed"))

    def samples(path):
        return [process_conversation(processor, c.messages, c.folder, c.where, 64, c.images)
                for c in read_conversations(str(path))]  # fmt: skip

    want = samples(jsonl)
    for path in (src.parent / "bytes.parquet", src.parent / "listed"):
        got = samples(path)
        assert len(got) == len(want) == 3
        for a, b in zip(got, want, strict=True):
            assert a.ids.tolist() == b.ids.tolist() and a.mask.tolist() == b.mask.tolist()
            assert torch.equal(a.images["pixel_values"], b.images["pixel_values"])
    bad = converted("listed")[0] | {"images": []}
    datasets.Dataset.from_list([bad]).save_to_disk(str(src.parent / "missing"))
    (c,) = read_conversations(str(src.parent / "missing"))
    with pytest.raises(ConfigError, match=r"missing: row 1: image part .* names no image .*0 given"):
        process_conversation(processor, c.messages, c.folder, c.where, 64, c.images)
