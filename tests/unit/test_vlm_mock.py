"""Generated image-text conversations (dataset.kind=mock_vlm) and the language model frozen
(model.freeze_language_model): the data are the tiny LLaVA processor's own rendering of a seeded stream,
the rules refuse what they cannot run, and a text recipe started from a vision-language folder takes the
vision-language model fields on the command line. (The projector-only training against transformers is in
tests/functional/test_vlm.py: `llava_projector`.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bridge.errors import ConfigError
from tests.functional.workers.vlm_models import save_vlm_model


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vlm_mock") / "hf"
    save_vlm_model("llava", folder)
    return folder


def test_the_stream_is_a_pure_function_of_seed_and_index():
    from bridge.training.data.vlm_mock import ANSWER_WORDS, IMAGE_SIZE, PROMPT, mock_conversation

    a, b, other = mock_conversation(7, 3), mock_conversation(7, 3), mock_conversation(8, 3)
    image = a.messages[0]["content"][0]["image"]
    assert image.size == IMAGE_SIZE and image.mode == "RGB"
    assert np.array_equal(np.asarray(image), np.asarray(b.messages[0]["content"][0]["image"]))
    assert not np.array_equal(np.asarray(image), np.asarray(other.messages[0]["content"][0]["image"]))
    assert a.messages[0]["content"][1]["text"] == PROMPT
    words = a.messages[1]["content"][0]["text"].split()
    assert ANSWER_WORDS[0] <= len(words) < ANSWER_WORDS[1]


def test_samples_are_the_processors_rendering_with_loss_on_the_answer(hf):
    from transformers import AutoProcessor

    from bridge.training.data.vlm_mock import build_mock_vlm_datasets, mock_conversation

    processor = AutoProcessor.from_pretrained(str(hf))
    tokenizer = type("Tok", (), {"path": str(hf), "pad": 0, "eod": 0})()
    plan = type("Plan", (), {"sample_counts": (5, 2, 0), "seed": 11, "seq_length": 64})()
    train, valid, test = build_mock_vlm_datasets(plan, tokenizer)
    assert (len(train), len(valid), test) == (5, 2, None)
    seen = set()
    for i in range(len(train)):
        row = train[i]
        seen.add(tuple(row["tokens"].tolist()))
    assert len(seen) == 5  # an epoch visits each generated conversation once
    # conversation 0 through the processor, as transformers renders it
    messages = mock_conversation(11, 0).messages
    text = processor.apply_chat_template(messages, tokenize=False)
    ref = processor(text=[text], images=[messages[0]["content"][0]["image"]], return_tensors="pt")
    ids = ref["input_ids"][0].tolist()
    rows = [train[i] for i in range(5)]
    (row,) = [r for r in rows if r["tokens"][: len(ids) - 1].tolist() == ids[:-1]]
    assert np.allclose(row["pixel_values"].numpy(), ref["pixel_values"].numpy())
    prompt = processor.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    head = len(processor(text=[prompt], images=[messages[0]["content"][0]["image"]])["input_ids"][0])
    mask = row["loss_mask"][: len(ids) - 1].tolist()  # labels are ids[1:]: answer tokens from head on
    assert mask == [0.0] * (head - 1) + [1.0] * (len(ids) - head)


def test_generated_data_read_no_files_and_need_a_vision_language_model(tmp_path):
    from bridge.config.checks.data import check_dataset
    from bridge.config.compose import compose
    from bridge.config.finetune_rules import check_sft_data
    from recipes.llama_finetune import llama32_1b_sft_config

    cfg, _ = compose(
        llama32_1b_sft_config(),
        overrides=["dataset.kind=mock_vlm", "dataset.data_paths=[x.jsonl]", "dataset.packed_sequence_size=0"],
    )
    with pytest.raises(ConfigError, match=r"dataset.data_paths.*generates image-text conversations"):
        check_dataset(cfg)
    cfg.dataset.data_paths = []
    with pytest.raises(ConfigError, match=r"dataset.kind = 'mock_vlm'.*vision-language model"):
        check_sft_data(cfg, cuda=False)


def test_a_text_recipe_from_a_vision_language_folder_takes_its_model_fields(hf):
    """compose reads where the run starts before the model overrides: fields of the folder's provider kind
    (here VLMModelProvider's) are known when they are applied."""
    from bridge.config.compose import compose
    from recipes.llama_finetune import llama32_1b_sft_config

    overrides = [f"checkpoint.pretrained_checkpoint={hf}", "model.freeze_language_model=true",
                 "model.freeze_vision_projection=true"]  # fmt: skip
    cfg, _ = compose(llama32_1b_sft_config(), overrides=overrides)
    assert cfg.model.freeze_language_model and cfg.model.freeze_vision_projection
    with pytest.raises(ConfigError, match="freeze_language_model"):  # a text start has no such field
        compose(llama32_1b_sft_config(), overrides=["model.freeze_language_model=true"])


@pytest.mark.usefixtures("single_process_groups")
def test_a_frozen_language_model_leaves_only_the_image_side_trainable(hf):
    from bridge import AutoBridge

    provider = AutoBridge.from_hf_pretrained(hf).to_megatron_provider()
    provider = dataclasses.replace(provider, freeze_language_model=True)
    (chunk,) = provider.provide_distributed_model(wrap_with_ddp=False)
    trainable = {n: p for n, p in chunk.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("vision.") for n in trainable)  # the vision tower is frozen too
    assert sum(p.numel() for p in trainable.values()) == sum(
        p.numel() for p in chunk.vision.projector().parameters()
    )
