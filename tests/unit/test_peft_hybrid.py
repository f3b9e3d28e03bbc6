"""LoRA / DoRA on Mamba-2 mixers and Gated DeltaNet (targets in_proj / out_proj, Megatron-Bridge's names) beside
attention and MLPs, at TP=1, against Hugging Face peft on transformers' NemotronHForCausalLM and
Qwen3_5ForCausalLM. (TP=2: tests/functional/test_peft_parallel.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from bridge.config.sections import PeftConfig
from bridge.errors import ConfigError
from tests.functional.workers.convert_models import hf_logits, megatron_logits, save_hf_model, tokens
from tests.functional.workers.peft_hybrid import CASES, check_against_peft, randomize
from tests.tolerances import logits_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups():
    yield
    from bridge.parallel import runtime

    runtime.destroy_distributed()


def _build(folder, targets: list[str], scheme: str = "lora", seed: int = 7):
    import functools

    from bridge import AutoBridge
    from bridge.peft import apply_peft

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=True)
    peft = PeftConfig(scheme=scheme, dim=4, alpha=8.0, target_modules=targets)
    provider.register_post_build_hook(functools.partial(apply_peft, peft=peft, seed=seed))
    (chunk,) = provider.provide_distributed_model(wrap_with_ddp=False)
    return bridge, chunk.eval()


@pytest.mark.parametrize("family", list(CASES))
def test_mixer_adapters_export_as_peft_loads_them(family, tmp_path):
    """Bridge's logits with adapters on every linear = peft's on transformers' model of the adapter folder =
    transformers' model of the merged export; sharded checkpoints store in_proj's B by blocks, as in_proj."""
    from megatron.core.dist_checkpointing.mapping import ShardedTensorFactory

    from bridge.checkpoint.save_load import model_sharded_state_dict

    source = tmp_path / "hf"
    save_hf_model(family, source, with_tokenizer=False)
    targets, modules = CASES[family]
    scheme = "dora" if family == "nemotron_h" else "lora"  # one of each (the TP=2 test runs both on both)
    bridge, chunk = _build(source, targets, scheme)
    randomize([chunk])
    ours = megatron_logits(chunk, tokens())
    bridge.save_hf_adapter([chunk], tmp_path / "adapter")
    bridge.save_hf_pretrained([chunk], tmp_path / "merged")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(modules) and config["use_dora"] == (scheme == "dora")
    check_against_peft(source, tmp_path / "adapter", tmp_path / "merged", ours, f"{family} {scheme}")

    (sharded,) = model_sharded_state_dict([chunk], "adapters").values()
    holder = "mixer" if family == "nemotron_h" else "self_attention"
    b = sharded[f"decoder.layers.0.{holder}.in_proj_adapter.linear_out.weight"]
    assert isinstance(b, ShardedTensorFactory)  # z / x / B / C / dt (query / ... / alpha) blocks apart


def test_mamba_out_proj_merges_and_its_adapter_folder_is_refused(tmp_path):
    """peft 0.21.2 refuses LoRA on nemotron_h's Mamba out_proj: the merged export carries it (transformers'
    model of it gives bridge's logits), the adapter folder is one error naming the module and the fix."""
    from transformers import AutoModelForCausalLM

    source = tmp_path / "hf"
    save_hf_model("nemotron_h", source, with_tokenizer=False)
    bridge, chunk = _build(source, ["out_proj"])
    randomize([chunk])
    ours = megatron_logits(chunk, tokens())
    bridge.save_hf_pretrained([chunk], tmp_path / "merged")
    hf = AutoModelForCausalLM.from_pretrained(source).eval()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    ref = hf_logits(merged, tokens())
    assert (ours - ref).abs().max().item() <= logits_tolerance(ref, merged.config)
    assert (ref - hf_logits(hf, tokens())).abs().max() > 1e-2  # the adapters matter
    with pytest.raises(
        ConfigError, match=r"adapters on out_proj of NemotronHForCausalLM.*peft 0.21.2 refuses"
    ):
        bridge.save_hf_adapter([chunk], tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()


def test_a_target_no_layer_has_is_one_error(tmp_path):
    save_hf_model("llama", tmp_path / "hf", with_tokenizer=False)
    with pytest.raises(
        ConfigError, match=r"no layer of the model has in_proj in a layer's mixer or self_attention"
    ):
        _build(tmp_path / "hf", ["linear_qkv", "in_proj"])


# (preset, bridge targets, the HF modules peft adapts for them, HF modules that one bridge adapter's A feeds)
COUNTS = (
    ("nemotronh_4b", ["in_proj", "linear_proj", "linear_fc1", "linear_fc2"], ["in_proj", "o_proj", "up_proj", "down_proj"], 1),
    ("qwen35_27b", ["in_proj", "out_proj", "linear_proj", "linear_fc2"], ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "o_proj", "down_proj"], 4),
)  # fmt: skip


@pytest.mark.parametrize("name,targets,modules,parts", COUNTS, ids=[c[0] for c in COUNTS])
def test_planner_adapter_count_equals_peft(name, targets, modules, parts):
    """The planner's adapter count (trainable parameters of a PEFT run) per layer kind, against peft on
    transformers' model of the published config (meta device). peft gives each of Qwen3.5's four in_proj
    modules its own A [r, hidden]; bridge's fused in_proj adapter has one."""
    import peft
    import transformers

    from bridge.models import preset
    from bridge.parallel.param_count import adapter_parameters
    from tests.unit.test_presets import PUBLISHED

    cls, values = PUBLISHED[name]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**values))
        adapted = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=modules))
    theirs = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    shape = preset(name).model_shape()
    in_proj_layers = sum(1 for n, _ in model.named_modules() if n.endswith(f".{modules[0]}"))
    theirs -= (parts - 1) * in_proj_layers * 16 * shape.hidden_size  # the repeated A of a fused in_proj
    assert adapter_parameters(shape, targets, 16) == theirs
