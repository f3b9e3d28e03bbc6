"""Vision-language models at TP=1 against transformers' own classes: image+text logits, a bit-identical
export that from_pretrained loads, and the parameter count of the built model."""

from __future__ import annotations

import pytest
import torch

from tests.functional.workers.convert_models import bit_identical, read_tensors
from tests.functional.workers.vlm_models import (
    VARIABLE_SIZE,
    VLM_FAMILIES,
    image_inputs,
    processed_batch,
    save_vlm_model,
    tiny_vlm_script,
    write_conversations,
)
from tests.tolerances import logits_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    out = {}
    for family in VLM_FAMILIES:
        folder = root / family
        hf = save_vlm_model(family, folder).eval()
        data = write_conversations(root / f"{family}_data", 2, wide=family in VARIABLE_SIZE)
        batch = processed_batch(folder, data, count=2)
        out[family] = (folder, hf, batch)
    return out


def _megatron_logits(chunk, batch, vocab: int) -> torch.Tensor:
    ids = batch["input_ids"]
    pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    with torch.no_grad():
        out = chunk(ids, pos, None, images=image_inputs(batch))
    return out[..., :vocab].float()


@pytest.mark.parametrize("family", list(VLM_FAMILIES))
def test_image_text_logits_match_hf_and_export_is_bit_identical(family, sources, tmp_path):
    _check_conversion(family, *sources[family], tmp_path)


def test_tied_ministral3_logits_match_hf_and_export_is_bit_identical(tmp_path):
    """Ministral 3 3B ties its output layer to the embedding (text_config and the outer config): one
    table in both models, the export writes no lm_head, as transformers saves it."""
    folder = tmp_path / "tied"
    hf = tiny_vlm_script().make_tiny_mistral3(folder, tie=True).eval()
    assert hf.lm_head.weight is hf.model.language_model.embed_tokens.weight
    batch = processed_batch(folder, write_conversations(tmp_path / "data", 2, wide=True), count=2)
    _check_conversion("mistral3", folder, hf, batch, tmp_path)


def _check_conversion(family: str, folder, hf, batch, tmp_path) -> None:
    import transformers

    from bridge import AutoBridge
    from bridge.models.vlm_provider import VLMModelProvider

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=True)
    assert isinstance(provider, VLMModelProvider) and provider.freeze_vision_model
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    vocab = hf.config.text_config.vocab_size
    # Both sides pad right and attend causally; transformers' padding mask only changes pad rows.
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        ref = hf(**batch).logits.float()
    ours = _megatron_logits(chunks[0], batch, vocab)
    # fp32: the vision side runs transformers' own modules (identical features), the 2-layer language
    # model the same operations in another order (fused qkv, grouped GEMMs): tests/tolerances.py's bound.
    # Gemma 3's image tokens see their whole image (its processor's token_type_ids): the reference
    # applies it, and a causal-only mask would move these logits by O(1).
    diff = (ours - ref)[keep].abs().max().item()
    bound = logits_tolerance(ref[keep], hf.config)
    assert diff <= bound, f"{family}: max |logits - HF| = {diff} > {bound} (tests/tolerances.py)"
    # the vision encoder is frozen by default, the projector trains
    vision = chunks[0].vision
    assert not any(p.requires_grad for p in vision.encoder().parameters())
    assert all(p.requires_grad for p in vision.projector().parameters())

    out = tmp_path / "export"
    bridge.save_hf_pretrained(chunks, out)
    assert bit_identical(read_tensors(folder), read_tensors(out)) is None
    assert (out / "config.json").read_bytes() == (folder / "config.json").read_bytes()
    reloaded = getattr(transformers, VLM_FAMILIES[family][1]).from_pretrained(out).eval()
    with torch.no_grad():
        for model in (reloaded, hf):  # fresh storage: CPU grouped GEMMs (MoE) sum by memory alignment
            for p in model.parameters():
                p.data = p.data.clone()
        assert torch.equal(reloaded(**batch).logits.float(), hf(**batch).logits.float())


@pytest.mark.parametrize("family", list(VLM_FAMILIES))
def test_parameter_count_equals_transformers_meta_model(family, sources):
    import transformers

    from bridge import AutoBridge
    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    folder, hf, _ = sources[family]
    provider = AutoBridge.from_hf_pretrained(folder).to_megatron_provider(load_weights=False)
    provider.perform_initialization = False
    if not runtime.is_initialized():  # an earlier test (generation) may have torn the groups down
        runtime.initialize_distributed(ParallelLayout(world_size=1))
    with torch.device("meta"):
        ours = sum(p.numel() for p in provider.provide().parameters())
        theirs = getattr(transformers, VLM_FAMILIES[family][1])(hf.config)
    tables = 1 if provider.share_embeddings_and_output_weights else 2  # Gemma 3 ties them, LLaVA not
    padding = (provider.padded_vocab_size() - provider.vocab_size) * provider.hidden_size * tables
    assert ours - padding == sum(p.numel() for p in theirs.parameters())
    # the planner's sizes of the image side (the family's vision_size.py, pure Python) against transformers'
    encoder, projector, *_ = provider.vision_sizes()
    if family.startswith(("qwen25_vl", "qwen3_vl")):  # the vision transformer holds the projector(s): mergers
        tower = theirs.model.visual
        mergers = [tower.merger, *getattr(tower, "deepstack_merger_list", ())]
        projectors = sum(p.numel() for m in mergers for p in m.parameters())
        towers = sum(p.numel() for p in tower.parameters()) - projectors
    else:
        towers = sum(p.numel() for p in theirs.model.vision_tower.parameters())
        projectors = sum(p.numel() for p in theirs.model.multi_modal_projector.parameters())
    assert (encoder, projector) == (towers, projectors)


def test_a_text_config_of_an_unknown_family_is_one_clear_error(sources):
    from bridge import AutoBridge
    from bridge.errors import ConfigError
    from bridge.models.hf_translation.common import read_config_json

    config = read_config_json(sources["llava"][0] / "config.json")
    config["text_config"]["model_type"] = "bloom"
    with pytest.raises(ConfigError, match=r"text_config.model_type='bloom': no text family converts"):
        AutoBridge.from_hf_config(config)


def test_gemma3_pan_and_scan_crops_match_transformers(sources):
    # Gemma 3's processor with do_pan_and_scan cuts a wide image into crops, each an image of its own
    # (its own <start_of_image> block, attending to itself only) after the whole image: 4 images here
    from PIL import Image

    from bridge import AutoBridge
    from tests.functional.workers.vlm_models import load_processor

    folder, hf, _ = sources["gemma3_vl"]
    processor = load_processor(folder)
    image = Image.new("RGB", (900, 300), (200, 30, 30))
    for x in range(0, 900, 50):  # stripes, so that the crops differ
        image.paste((0, 255, 0), (x, 0, x + 5, 300))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is this"}]}]
    text = processor.apply_chat_template(messages, tokenize=False)
    batch = dict(processor(text=[text], images=[[image]], do_pan_and_scan=True, return_tensors="pt"))
    assert batch["pixel_values"].shape[0] == 4  # the image and its 3 crops
    chunks = AutoBridge.from_hf_pretrained(folder).to_megatron_provider(load_weights=True)
    chunks = chunks.provide_distributed_model(wrap_with_ddp=False)
    with torch.no_grad():
        ref = hf(**batch).logits.float()
    ours = _megatron_logits(chunks[0], batch, hf.config.text_config.vocab_size)
    assert (ours - ref).abs().max().item() <= logits_tolerance(ref, hf.config)


def test_too_few_image_tokens_is_one_clear_error(sources):
    from bridge import AutoBridge
    from bridge.models.vlm_model import ImageTokenMismatch

    folder, _, batch = sources["llava"]
    chunk = (
        AutoBridge.from_hf_pretrained(folder)
        .to_megatron_provider()
        .provide_distributed_model(wrap_with_ddp=False)[0]
    )
    ids = batch["input_ids"].clone()
    first = int((ids[0] == chunk.vision.image_token_id).nonzero()[0, 0])
    ids[0, first] = 0  # one placeholder of the first sample's image lost
    with pytest.raises(ImageTokenMismatch, match="image tokens"):
        _megatron_logits(chunk, dict(batch, input_ids=ids), 10)


def test_mrope_positions_refuse_video_tokens_without_videos_and_text_generation_equals_transformers(sources):
    """Qwen2.5-VL: a video token without video inputs is one clear error (videos: test_vlm_video.py); greedy generation from a text prompt equals
    transformers' generate with and without the KV cache (with an image: test_generate_vlm_families.py)."""
    from bridge import AutoBridge
    from bridge.errors import ConfigError
    from bridge.inference.generate import generate

    folder, hf, batch = sources["qwen25_vl"]
    provider = AutoBridge.from_hf_pretrained(folder).to_megatron_provider()
    chunk = provider.provide_distributed_model(wrap_with_ddp=False)[0]
    ids = batch["input_ids"].clone()
    ids[0, -1] = hf.config.video_token_id
    with pytest.raises(ConfigError, match="video tokens .* without video inputs"):
        _megatron_logits(chunk, dict(batch, input_ids=ids), 10)
    prompt = [int(t) for t in batch["input_ids"][0, 18:23]]  # text tokens after the image
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False)[0, len(prompt) :]
    for cache in (True, False):
        assert (
            generate([chunk], prompt, 4, vocab_size=provider.vocab_size, kv_cache=cache).ids == ref.tolist()
        )


def test_mrope_section_must_split_half_the_head():
    from bridge.errors import ConfigError
    from bridge.models import preset

    p = preset("qwen25_vl_7b")
    p.mrope_section = [16, 24, 16]  # 56, not 64 = 128 / 2
    with pytest.raises(ConfigError, match=r"mrope_section.*summing to half the rotary head dimension \(64\)"):
        p.finalize()


def test_qwen25_vl_class_defaults_equal_transformers():
    """The keys a Qwen2.5-VL config.json may omit are read as transformers' config classes fill them."""
    from transformers import Qwen2_5_VLConfig

    from bridge.models.qwen25_vl.hf_config import CLASS_DEFAULTS

    config = Qwen2_5_VLConfig()
    for model_type, cfg in (("qwen2_5_vl", config), ("qwen2_5_vl_text", config.text_config)):
        for key, value in CLASS_DEFAULTS[model_type].items():
            if key == "rope_theta":
                have = cfg.rope_parameters["rope_theta"]
            elif key == "sliding_window":  # an instance keeps the class default only with use_sliding_window
                have = getattr(type(cfg), key)
            elif key == "tie_word_embeddings":  # the outer config's (transformers 5 ties by it)
                have = config.tie_word_embeddings
            else:
                have = getattr(cfg, key)
            assert have == value, (model_type, key, have, value)


def test_qwen25_vl_flat_config_reads_as_the_nested_one(sources):
    """The published checkpoints' flat config.json (text keys at the top level, rope_scaling
    {"type": "mrope"}) converts to the provider of the transformers 5 nested one, as Qwen2_5_VLConfig reads it."""
    import dataclasses

    from transformers import Qwen2_5_VLConfig

    from bridge import AutoBridge
    from bridge.models.hf_translation.common import read_config_json

    nested = read_config_json(sources["qwen25_vl"][0] / "config.json")
    text = dict(nested["text_config"])
    rope = text.pop("rope_parameters")
    flat = {k: v for k, v in nested.items() if k != "text_config"} | {
        k: v for k, v in text.items() if k not in ("model_type", "tie_word_embeddings")
    }
    flat |= {
        "rope_theta": rope["rope_theta"],
        "rope_scaling": {"type": "mrope", "mrope_section": rope["mrope_section"]},
    }
    # transformers reads both alike (but for a leftover legacy "type" key and where it keeps the tie)
    read = [Qwen2_5_VLConfig(**c).text_config.to_dict() for c in (flat, nested)]
    for r in read:
        r.pop("tie_word_embeddings", None)
        r["rope_parameters"].pop("type", None)
    assert read[0] == read[1]
    ours = [
        dataclasses.asdict(AutoBridge.from_hf_config(c).to_megatron_provider(load_weights=False))
        for c in (flat, nested)
    ]
    assert ours[0] == ours[1]
    assert (ours[0]["position_embedding_type"], ours[0]["mrope_section"]) == ("mrope", [2, 3, 3])


def test_qwen3_vl_moe_reads_either_expert_layout_and_writes_back_the_one_it_read(sources, tmp_path):
    """transformers' Qwen3-VL-MoE holds gate_up_proj as [experts, 2 * ffn, hidden] (as its save_pretrained
    writes them) while the published checkpoints store [experts, hidden, 2 * ffn] (and down_proj the other
    way round); its loader takes both. bridge reads both to transformers' logits and writes each back in
    its own layout: save_hf_pretrained, and through a Megatron checkpoint (import_ckpt / export_ckpt)."""
    import shutil

    import transformers
    from safetensors.torch import load_file, save_file

    from bridge import AutoBridge
    from bridge.conversion.streaming import stream_export

    folder, hf, batch = sources["qwen3_vl_moe"]
    published = tmp_path / "published"
    shutil.copytree(folder, published)
    for shard in published.glob("*.safetensors"):
        tensors = load_file(shard)
        stacked = [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]
        assert stacked
        for n in stacked:
            tensors[n] = tensors[n].transpose(1, 2).contiguous()
        save_file(tensors, shard, metadata={"format": "pt"})
    cls = transformers.Qwen3VLMoeForConditionalGeneration
    # the reference: transformers loads the published layout into the same model
    theirs = cls.from_pretrained(published).state_dict()
    assert all(torch.equal(t, theirs[n]) for n, t in cls.from_pretrained(folder).state_dict().items())

    with torch.no_grad():
        ref = hf(**batch).logits.float()
    keep = batch["attention_mask"].bool()
    for source in (folder, published):
        bridge = AutoBridge.from_hf_pretrained(source)
        chunks = bridge.to_megatron_provider(load_weights=True).provide_distributed_model(wrap_with_ddp=False)
        diff = (_megatron_logits(chunks[0], batch, hf.config.text_config.vocab_size) - ref)[keep].abs().max()
        assert diff <= logits_tolerance(ref[keep], hf.config), (source.name, diff.item())
        out = tmp_path / f"{source.name}_export"
        bridge.save_hf_pretrained(chunks, out)
        assert bit_identical(read_tensors(source), read_tensors(out)) is None, source.name
        megatron = tmp_path / f"{source.name}_megatron"
        AutoBridge.import_ckpt(source, megatron)
        stream_export(megatron, tmp_path / f"{source.name}_back")
        assert bit_identical(read_tensors(source), read_tensors(tmp_path / f"{source.name}_back")) is None
