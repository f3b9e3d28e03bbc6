"""AutoBridge in one process (TP=1) against Hugging Face's own model classes, for every family."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
import torch
import transformers

from bridge.errors import ConfigError
from bridge.models.families import architecture_families
from tests.functional.workers.convert_models import (
    FAMILIES,
    bit_identical,
    hf_logits,
    megatron_logits,
    read_tensors,
    refused_by_installed_release,
    save_hf_model,
    tokens,
)
from tests.tolerances import logits_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


@pytest.fixture(scope="module")
def sources(family_sources):  # tests/unit/conftest.py
    return family_sources


def _import(folder):
    from bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=True)
    return bridge, provider, provider.provide_distributed_model(wrap_with_ddp=False)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_match_hf_and_export_is_bit_identical(family, sources, tmp_path):
    from transformers import AutoModelForCausalLM

    folder, hf = sources[family]
    refused = refused_by_installed_release(family)
    if refused:  # e.g. MLA without query compression on megatron-core 0.19.2: one clear error at build
        with pytest.raises(ConfigError, match=refused):
            _import(folder)
        return
    bridge, _, chunks = _import(folder)
    toks = tokens()
    ref = hf_logits(hf, toks)
    diff = (megatron_logits(chunks[0], toks) - ref).abs().max().item()
    bound = logits_tolerance(ref, hf.config)
    print(f"\nTOL {family}: max |logits - HF| = {diff:.2e}, bound {bound:.2e}, ratio {diff / bound:.3f}")
    assert diff <= bound, f"{family}: max |logits - HF| = {diff} > {bound} (tests/tolerances.py)"

    out = tmp_path / "export"
    bridge.save_hf_pretrained(chunks, out)
    assert bit_identical(read_tensors(folder), read_tensors(out)) is None
    # config, generation config and tokenizer files come over unchanged
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (folder / name).read_bytes(), name
    reloaded = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    assert torch.equal(hf_logits(reloaded, toks), ref)


def test_provider_fields_follow_the_hf_config(sources):
    from bridge import AutoBridge

    p = AutoBridge.from_hf_pretrained(sources["llama"][0]).to_megatron_provider(load_weights=False)
    assert (p.rotary_base, p.rope_scaling, p.rope_scaling_factor) == (500000.0, True, 32.0)
    assert (p.rope_scaling_low_freq_factor, p.rope_scaling_high_freq_factor) == (2.0, 8.0)
    assert p.rope_scaling_original_max_position_embeddings == 32
    assert p.share_embeddings_and_output_weights and p.num_query_groups == 2 and p.vocab_size == 250
    q = AutoBridge.from_hf_pretrained(sources["qwen3_moe"][0]).to_megatron_provider(load_weights=False)
    assert q.qk_layernorm and q.kv_channels == 16 and q.num_moe_experts == 4 and q.moe_router_topk == 2
    assert q.moe_router_pre_softmax and q.moe_ffn_hidden_size == 32 and q.layernorm_epsilon == 1e-5
    assert q.moe_layer_freq == [1, 0] and q.ffn_hidden_size == 96  # layer 1 is a dense MLP
    m = AutoBridge.from_hf_pretrained(sources["mistral"][0]).to_megatron_provider(load_weights=False)
    assert m.window_size == [5, 0]
    phi = AutoBridge.from_hf_pretrained(sources["phi3"][0]).to_megatron_provider(load_weights=False)
    assert phi.window_size == [5, 0] and phi.rotary_percent == 0.5 and phi.num_query_groups == 2
    assert not phi.add_qkv_bias and not phi.add_bias_linear
    q2 = AutoBridge.from_hf_pretrained(sources["qwen2_moe"][0]).to_megatron_provider(load_weights=False)
    assert q2.add_qkv_bias and q2.moe_layer_freq == [0, 1] and not q2.moe_router_pre_softmax
    assert q2.moe_shared_expert_intermediate_size == 64 and q2.moe_shared_expert_gate
    v3 = AutoBridge.from_hf_pretrained(sources["deepseek_v3"][0]).to_megatron_provider(load_weights=False)
    assert v3.multi_latent_attention and v3.q_lora_rank == 24 and v3.moe_router_enable_expert_bias
    assert (v3.moe_router_num_groups, v3.moe_router_group_topk, v3.rope_type) == (4, 2, "yarn")


def test_bf16_checkpoint_keeps_its_dtype_and_sharding(tmp_path):

    src = tmp_path / "src"
    hf = save_hf_model("qwen2", src, dtype=torch.bfloat16)
    # re-save sharded: several files and an index
    shutil.rmtree(src)
    hf.save_pretrained(src, max_shard_size="40KB")
    index = json.loads((src / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1

    from bridge.parallel.wrappers import unwrap

    bridge, provider, chunks = _import(src)
    assert provider.params_dtype == "bf16"
    assert unwrap(chunks[0]).embedding.word_embeddings.weight.dtype == torch.bfloat16
    out = tmp_path / "out"
    bridge.save_hf_pretrained(chunks, out)
    assert bit_identical(read_tensors(src), read_tensors(out)) is None
    assert json.loads((out / "model.safetensors.index.json").read_text())["weight_map"] == index["weight_map"]

    resharded = tmp_path / "resharded"
    bridge.save_hf_pretrained(chunks, resharded, max_shard_size=100_000)
    files = sorted(p.name for p in resharded.glob("*.safetensors"))
    assert len(files) > 1 and files[0].startswith("model-00001-of-")
    assert bit_identical(read_tensors(src), read_tensors(resharded)) is None


def _cli():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "conversion" / "convert_checkpoint.py"
    spec = importlib.util.spec_from_file_location("convert_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_cli_import_then_export_round_trip(sources, tmp_path, capsys):
    main = _cli()
    folder, _ = sources["qwen3_moe"]
    megatron = tmp_path / "megatron"
    assert main(["import", "--hf-path", str(folder), "--megatron-path", str(megatron)]) == 0
    assert (megatron / "latest_checkpointed_iteration.txt").read_text().strip() == "0"
    assert not list(tmp_path.glob(".*partial"))
    out = tmp_path / "hf_again"
    assert main(["export", "--megatron-path", str(megatron), "--hf-path", str(out)]) == 0
    assert bit_identical(read_tensors(folder), read_tensors(out)) is None
    assert (out / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    # a second export onto the same folder is refused, with exit code 2 and the reason on stderr
    assert main(["export", "--megatron-path", str(megatron), "--hf-path", str(out)]) == 2
    assert "hf_path=" in capsys.readouterr().err


# ---- errors: each raised before anything is written ------------------------------------------------


def _rewrite_without(folder, drop=None, add=None, replace=None):
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    if drop:
        del tensors[drop]
    tensors.update(add or {})
    tensors.update(replace or {})
    save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.fixture
def llama_copy(sources, tmp_path):
    folder = tmp_path / "llama"
    shutil.copytree(sources["llama"][0], folder)
    return folder


def _assert_import_fails(folder, tmp_path, match):
    from bridge import AutoBridge

    target = tmp_path / "never_written"
    with pytest.raises(ConfigError, match=match):
        AutoBridge.import_ckpt(folder, target)
    assert not target.exists() and not list(tmp_path.glob(".never_written*"))


def test_missing_tensor(llama_copy, tmp_path):
    _rewrite_without(llama_copy, drop="model.layers.1.self_attn.k_proj.weight")
    _assert_import_fails(
        llama_copy, tmp_path, r"missing tensor 'model\.layers\.1\.self_attn\.k_proj\.weight'"
    )


def test_unexpected_tensor(llama_copy, tmp_path):
    _rewrite_without(llama_copy, add={"model.layers.0.extra.weight": torch.zeros(3)})
    _assert_import_fails(llama_copy, tmp_path, r"does not use: model\.layers\.0\.extra\.weight")


def test_shape_mismatch(llama_copy, tmp_path):
    _rewrite_without(llama_copy, replace={"model.layers.0.mlp.up_proj.weight": torch.zeros(95, 64)})
    _assert_import_fails(llama_copy, tmp_path, r"up_proj\.weight'.*shape \[95, 64\].*needs \[96, 64\]")


def test_tied_checkpoint_may_carry_lm_head(llama_copy, sources):
    # some tied checkpoints store lm_head too (a copy of the embedding): accepted, the embedding is used
    from safetensors.torch import load_file

    emb = load_file(str(llama_copy / "model.safetensors"))["model.embed_tokens.weight"]
    _rewrite_without(llama_copy, add={"lm_head.weight": emb.clone()})
    _, _, chunks = _import(llama_copy)
    ref = hf_logits(sources["llama"][1], tokens())
    bound = logits_tolerance(ref, sources["llama"][1].config)
    assert (megatron_logits(chunks[0], tokens()) - ref).abs().max().item() <= bound


def test_truncated_file(llama_copy, tmp_path):
    path = llama_copy / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    _assert_import_fails(llama_copy, tmp_path, "truncated or corrupt")


def test_corrupt_header(llama_copy, tmp_path):
    path = llama_copy / "model.safetensors"
    data = bytearray(path.read_bytes())
    assert struct.unpack("<Q", data[:8])[0] > 4  # the header is where we scribble
    data[8:12] = b"\xff\xfe{["
    path.write_bytes(bytes(data))
    _assert_import_fails(llama_copy, tmp_path, "header is not valid JSON")


def test_unsupported_architecture(sources, tmp_path):
    from bridge import AutoBridge

    config = json.loads((sources["llama"][0] / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    assert not AutoBridge.supports(config)
    with pytest.raises(ConfigError, match="GPT2LMHeadModel.*LlamaForCausalLM.*Qwen3MoeForCausalLM"):
        AutoBridge.from_hf_config(config)
    # The list is the family folders' ARCHITECTURES (no table here to extend per family), and each name is
    # a model class transformers itself defines.
    supported = AutoBridge.list_supported_models()
    assert supported == sorted(architecture_families())
    assert [name for name in supported if not hasattr(transformers, name)] == []


def test_phi3_longrope_is_refused_when_the_bridge_is_made(sources, tmp_path):
    # the 128k-context Phi-3 / Phi-3.5 configs: one ConfigError naming the field, before anything is built
    from bridge import AutoBridge

    folder = tmp_path / "phi3_128k"
    shutil.copytree(sources["phi3"][0], folder)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "short_factor": [1.0] * 4,
        "long_factor": [2.0] * 4,
    }
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"rope_parameters.rope_type='longrope'.*LongRoPE"):
        AutoBridge.from_hf_pretrained(folder)


def test_non_empty_target(sources, tmp_path):
    from bridge import AutoBridge

    folder, _ = sources["qwen2"]
    bridge, _, chunks = _import(folder)
    target = tmp_path / "taken"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="exists and is not an empty folder"):
        bridge.save_hf_pretrained(chunks, target)
    with pytest.raises(ConfigError, match="megatron_path=.*exists and is not an empty folder"):
        AutoBridge.import_ckpt(folder, target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"] and not list(tmp_path.glob(".taken*"))


def test_export_of_a_provider_without_hf_source(sources, tmp_path):
    """A model with no HF folder behind it (e.g. trained from scratch): config.json from the provider."""
    from transformers import AutoModelForCausalLM

    from bridge import AutoBridge

    folder, hf = sources["qwen3"]
    _, provider, chunks = _import(folder)
    out = tmp_path / "from_provider"
    AutoBridge.from_provider(provider, "Qwen3ForCausalLM").save_hf_pretrained(chunks, out)
    assert not (out / "tokenizer.json").exists()  # nothing to copy from
    assert bit_identical(read_tensors(folder), read_tensors(out)) is None
    reloaded = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    assert torch.equal(hf_logits(reloaded, tokens()), hf_logits(hf, tokens()))


# ---- issue 11, item 11: bad input is one error line naming the file or tensor ---------------------


def test_non_finite_weight_is_refused_unless_allowed(llama_copy, tmp_path):
    from safetensors.torch import load_file

    from bridge import AutoBridge

    name = "model.layers.1.mlp.down_proj.weight"
    bad = load_file(str(llama_copy / "model.safetensors"))[name].clone()
    bad[3, 5], bad[0, 0] = float("nan"), float("-inf")
    _rewrite_without(llama_copy, replace={name: bad})
    _assert_import_fails(
        llama_copy, tmp_path, rf"tensor '{name}' in .*model\.safetensors holds 1 NaN and 1 Inf values"
    )
    AutoBridge.import_ckpt(llama_copy, tmp_path / "allowed", allow_non_finite=True)
    assert (tmp_path / "allowed" / "latest_checkpointed_iteration.txt").is_file()


def test_cli_bad_config_json_and_mismatched_hf_config_are_one_line(sources, tmp_path, capsys):
    main = _cli()
    broken = tmp_path / "broken"
    shutil.copytree(sources["llama"][0], broken)
    (broken / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]')
    assert main(["import", "--hf-path", str(broken), "--megatron-path", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {broken / 'config.json'}: not valid JSON"), err
    assert not (tmp_path / "m").exists()

    megatron = tmp_path / "megatron"
    assert main(["import", "--hf-path", str(sources["qwen2"][0]), "--megatron-path", str(megatron)]) == 0
    capsys.readouterr()
    other = sources["qwen3"][0]  # another architecture: different tensors and shapes
    out = tmp_path / "out"
    args = ["export", "--megatron-path", str(megatron), "--hf-path", str(out), "--hf-config", str(other)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert str(other / "config.json") in err[0] and str(megatron) in err[0], err
    assert not out.exists()
