"""LoRA / DoRA on multi-latent attention (DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash) at TP=1, against
Hugging Face peft on transformers' DeepseekV2/V3ForCausalLM and Glm4MoeLiteForCausalLM.

Megatron-Core's MLASelfAttention holds linear_q_proj (no query compression) or linear_q_down_proj /
linear_q_up_proj, linear_kv_down_proj (the latent and the shared RoPE key), linear_kv_up_proj (per head
[k_nope; v]) and linear_proj: the adapter folder names HF's q_proj or q_a_proj / q_b_proj,
kv_a_proj_with_mqa, kv_b_proj and o_proj. TP=2 with sequence parallelism: tests/functional/test_peft_parallel.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bridge.config.finetune_rules import check_mla_targets, mla_attention_targets
from bridge.errors import ConfigError
from tests.functional.workers.convert_models import (
    hf_logits,
    megatron_logits,
    read_tensors,
    refused_by_installed_release,
    save_hf_model,
    tokens,
)
from tests.tolerances import logits_tolerance, merged_weight_tolerance
from tests.unit.test_peft import _build, _peft, _peft_model, _randomize

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
Q_COMPRESSED = mla_attention_targets(q_lora_rank=24)
HF_NAMES = {
    "linear_q_proj": "q_proj",
    "linear_q_down_proj": "q_a_proj",
    "linear_q_up_proj": "q_b_proj",
    "linear_kv_down_proj": "kv_a_proj_with_mqa",
    "linear_kv_up_proj": "kv_b_proj",
    "linear_proj": "o_proj",
}


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups():
    yield
    from bridge.parallel import runtime

    runtime.destroy_distributed()


# deepseek_v3: q compression, YaRN; glm4_moe_lite: GLM's latent norms, default RoPE (DoRA here);
# deepseek_v2: no q compression (linear_q_proj), refused by megatron-core 0.19.2's MLA (its q norm)
@pytest.mark.parametrize(
    "family,scheme,targets",
    [
        ("deepseek_v3", "lora", Q_COMPRESSED),
        ("glm4_moe_lite", "dora", Q_COMPRESSED),
        ("deepseek_v2", "lora", mla_attention_targets(q_lora_rank=None)),
    ],
)
def test_mla_adapters_match_peft(family, scheme, targets, tmp_path):
    from transformers import AutoModelForCausalLM

    from bridge.peft import apply_peft

    if refused_by_installed_release(family):
        pytest.skip(f"the installed megatron-core refuses {family}'s tiny model")
    folder = tmp_path / family
    save_hf_model(family, folder, with_tokenizer=False)
    bridge, chunk = _build(folder, None)
    # Megatron-Bridge's default attention targets name linear_qkv, which this attention does not have
    with pytest.raises(ConfigError, match="no layer of the model has linear_qkv.*linear_kv_down_proj"):
        apply_peft([chunk], _peft(scheme, target_modules=["linear_qkv", "linear_proj"]), seed=7)
    assert all(p.requires_grad for p in chunk.parameters())  # refused before changing anything
    apply_peft([chunk], _peft(scheme, target_modules=targets), seed=7)
    _randomize(chunk)
    toks = tokens()
    ours = megatron_logits(chunk, toks)

    bridge.save_hf_adapter([chunk], tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(HF_NAMES[t] for t in targets)
    saved = read_tensors(tmp_path / "adapter")
    kv_a = saved["base_model.model.model.layers.0.self_attn.kv_a_proj_with_mqa.lora_B.weight"]
    assert kv_a.shape == (32 + 8, 4)  # kv_lora_rank + qk_rope_head_dim rows: the latent and the RoPE key
    kv_b = saved["base_model.model.model.layers.0.self_attn.kv_b_proj.lora_B.weight"]
    assert kv_b.shape == (4 * (16 + 12), 4)  # heads x (qk_nope_head_dim + v_head_dim)
    peft_model = _peft_model(folder, tmp_path / "adapter")
    ref = hf_logits(peft_model, toks)
    diff, bound = (ours - ref).abs().max().item(), logits_tolerance(ref, peft_model.config)
    print(f"\n{family} {scheme}: max |bridge - peft| logits = {diff:.2e} (bound {bound:.2e})")
    assert diff <= bound, (diff, bound)
    base_logits = hf_logits(AutoModelForCausalLM.from_pretrained(folder), toks)
    assert (ref - base_logits).abs().max() > 1e-2  # the adapters matter

    bridge.save_hf_pretrained([chunk], tmp_path / "merged")
    merged_ref = peft_model.merge_and_unload().state_dict()
    merged = read_tensors(tmp_path / "merged")
    for target in targets:
        k = f"model.layers.1.self_attn.{HF_NAMES[target]}.weight"
        wdiff = (merged[k] - merged_ref[k]).abs().max().item()
        assert wdiff <= merged_weight_tolerance(merged_ref[k], rank=4), (k, wdiff)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", attn_implementation="eager").eval()
    assert (hf_logits(reloaded, toks) - ref).abs().max().item() <= logits_tolerance(ref, reloaded.config)


def _model(mla: bool, q_lora_rank: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(multi_latent_attention=mla, q_lora_rank=q_lora_rank)


@pytest.mark.parametrize(
    "model,targets,message",
    [
        (_model(True, 24), ["linear_qkv", "linear_proj"], r"has no linear_qkv.*linear_q_down_proj,linear_q_up_proj"),
        (_model(True, None), ["linear_q_down_proj"], r"q_lora_rank=None\) has no linear_q_down_proj.*linear_q_proj,"),
        (_model(True, 24), ["linear_q_proj", "linear_kv_up_proj"], r"has no linear_q_proj.*or \[linear_kv_up_proj\]"),
        (_model(False), ["linear_qkv", "linear_kv_down_proj"], r"linear_kv_down_proj are multi-latent attention's"),
    ],
)  # fmt: skip
def test_targets_the_attention_does_not_have_are_refused_before_launch(model, targets, message):
    with pytest.raises(ConfigError, match=r"peft\.target_modules = .*" + message):
        check_mla_targets(model, targets)


def test_every_attention_linear_is_accepted():
    check_mla_targets(_model(True, 24), Q_COMPRESSED)
    check_mla_targets(_model(True, None), mla_attention_targets(None))
    check_mla_targets(_model(False), ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"])


def test_mla_at_tp2_needs_sequence_parallelism():
    from bridge.config.run_plan import build_plan
    from tests.functional.workers.train_common import MLA_TINY as MLA
    from tests.functional.workers.train_common import tiny_config

    cfg = tiny_config(*MLA, "model.tensor_model_parallel_size=2")
    with pytest.raises(ConfigError, match=r"sequence_parallel = False: multi-latent attention at .*=2.*"):
        build_plan(cfg, 2)
    build_plan(tiny_config(*MLA, "model.tensor_model_parallel_size=2", "model.sequence_parallel=true"), 2)
