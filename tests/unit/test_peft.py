"""PEFT (LoRA / DoRA) in one process (TP=1), against Hugging Face peft on the same weights."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from bridge.config.sections import PeftConfig
from bridge.errors import ConfigError
from tests.functional.workers.convert_models import (
    hf_logits,
    megatron_logits,
    read_tensors,
    save_hf_model,
    tokens,
)
from tests.tolerances import logits_tolerance, merged_weight_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
# qwen2: q/k/v biases; qwen3: head_dim != hidden / heads; phi3: HF's fused qkv_proj / gate_up_proj;
# gemma: (1 + w) norms, GeGLU, scaled embeddings; glm4: sandwich norms, fused gate_up_proj, interleaved
# partial RoPE; nemotron: LayerNorm1P, MLP without gate; starcoder2: biases on every adapted linear;
# olmo2, gemma2: norms after the branches (the adapters of linear_proj / linear_fc2 act before them);
# granite: branch outputs scaled after the adapters; exaone4: norms after the branches, per-head q/k norms
FAMILIES = (
    *("llama", "qwen2", "qwen3", "phi3", "gemma", "glm4", "nemotron", "starcoder2", "olmo2", "gemma2"),
    *("granite", "exaone4"),
)
_ATTENTION_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
# The HF modules peft adapts for all four targets, where they are not Llama's.
HF_MODULES = {
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],  # HF fuses them: one peft module each
    "glm4": [*_ATTENTION_MODULES, "gate_up_proj", "down_proj"],
    "nemotron": [*_ATTENTION_MODULES, "up_proj", "down_proj"],
    "starcoder2": [*_ATTENTION_MODULES, "c_fc", "c_proj"],
}
# transformers' model of peft's merged weights against peft's model (HF against HF, no bridge weights
# in either): with random adapters on these tiny models fp32 rounding differs by up to ~1.6e-5
# (squared ReLU) and ~4e-5 (Gemma's sqrt(hidden)-scaled embeddings), from run to run.
ALL_TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups():
    yield
    from bridge.parallel import runtime

    runtime.destroy_distributed()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    for family in FAMILIES:
        save_hf_model(family, root / family)
    return root


def _peft(scheme: str, **kw) -> PeftConfig:
    return PeftConfig(scheme=scheme, **{"dim": 4, "alpha": 8.0, **kw})


def _build(folder, peft: PeftConfig | None, seed: int = 7):
    """The bridge, and one TP=1 chunk with the HF weights and (after them) the adapters."""
    from bridge import AutoBridge
    from bridge.peft import apply_peft

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=True)
    if peft is not None:
        provider.register_post_build_hook(functools.partial(apply_peft, peft=peft, seed=seed))
    (chunk,) = provider.provide_distributed_model(wrap_with_ddp=False)
    return bridge, chunk.eval()


def _randomize(chunk, seed: int = 0) -> None:
    """Non-zero adapters (B starts at zero); DoRA's m near ||W|| but not equal."""
    from bridge.peft import adapted_linears

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for item in adapted_linears([chunk]):
            a = item.adapter
            for p in (a.linear_in.weight, a.linear_out.weight):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            if a.scheme == "dora":
                p = a.weight_magnitude
                p.mul_(1 + 0.2 * torch.randn(p.shape, generator=gen))


def _peft_model(folder, adapter_dir, trainable: bool = False):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    return PeftModel.from_pretrained(hf, adapter_dir, is_trainable=trainable).eval()


def _snapshot(chunk) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in chunk.state_dict().items() if "_extra_state" not in k}


@pytest.mark.parametrize("scheme", ["lora", "dora"])
@pytest.mark.parametrize("family", FAMILIES)
def test_adapter_folder_and_merged_export_match_peft(family, scheme, sources, tmp_path):
    from transformers import AutoModelForCausalLM

    folder = sources / family
    bridge, chunk = _build(folder, _peft(scheme))
    _randomize(chunk)
    toks = tokens()
    ours = megatron_logits(chunk, toks)

    bridge.save_hf_adapter([chunk], tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    hf_modules = HF_MODULES.get(family, [*_ATTENTION_MODULES, "gate_proj", "up_proj", "down_proj"])
    assert config["target_modules"] == hf_modules
    assert (config["r"], config["lora_alpha"], config["use_dora"]) == (4, 8, scheme == "dora")
    assert config["base_model_name_or_path"] == str(folder)
    peft_model = _peft_model(folder, tmp_path / "adapter")
    ref = hf_logits(peft_model, toks)
    diff = (ours - ref).abs().max().item()
    bound = logits_tolerance(ref, peft_model.config)
    print(f"\n{family} {scheme}: max |bridge - peft| logits = {diff:.2e} (bound {bound:.2e})")
    assert diff <= bound, (diff, bound)
    base_logits = hf_logits(AutoModelForCausalLM.from_pretrained(folder), toks)
    assert (ref - base_logits).abs().max() > 1e-2  # the adapters matter

    before = _snapshot(chunk)
    bridge.save_hf_pretrained([chunk], tmp_path / "merged")
    after = _snapshot(chunk)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(megatron_logits(chunk, toks), ours)  # hooks and weights unchanged

    merged_ref = peft_model.merge_and_unload().state_dict()
    merged = read_tensors(tmp_path / "merged")
    attn = "qkv_proj" if family == "phi3" else "q_proj"
    assert set(merged) <= set(merged_ref) and f"model.layers.0.self_attn.{attn}.weight" in merged
    for k in merged:  # each merged weight at its own magnitude
        wdiff = (merged[k] - merged_ref[k]).abs().max().item()
        assert wdiff <= merged_weight_tolerance(merged_ref[k], rank=4), (k, wdiff)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", attn_implementation="eager").eval()
    reload_diff = (hf_logits(reloaded, toks) - ref).abs().max().item()
    assert reload_diff <= logits_tolerance(ref, reloaded.config), reload_diff


FUSED = {"q_proj": ("q_proj", "k_proj", "v_proj"), "gate_proj": ("gate_proj", "up_proj")}
FUSED |= {m: parts for parts in list(FUSED.values()) for m in parts}


@pytest.mark.parametrize("scheme", ["lora", "dora"])
def test_gradients_match_peft(scheme, sources, tmp_path):
    """Backward through the adapters (DoRA: the weight norm is a constant, as in peft)."""
    from bridge.conversion.hf_adapter import export_adapter_tensors

    folder = sources / "llama"
    bridge, chunk = _build(folder, _peft(scheme))
    _randomize(chunk, seed=1)
    bridge.save_hf_adapter([chunk], tmp_path / "adapter")
    peft_model = _peft_model(folder, tmp_path / "adapter", trainable=True)
    toks = tokens()
    weights = torch.randn(*toks.shape, 250, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(toks.shape[1]).expand_as(toks)
    (chunk(toks, pos, attention_mask=None)[..., :250] * weights).sum().backward()
    ours = dict(export_adapter_tensors([chunk], bridge.family, 250, grads=True))
    (peft_model(toks).logits * weights).sum().backward()
    theirs = {
        n.replace(".default", "").replace("magnitude_vector.weight", "magnitude_vector"): p.grad
        for n, p in peft_model.named_parameters()
        if p.requires_grad
    }
    assert ours.keys() == theirs.keys()
    worst = 0.0
    for name, grad in ours.items():
        want = theirs[name]
        module = name.split(".")[-3]
        if name.endswith("lora_A.weight") and module in FUSED:  # one A feeds every fused part
            want = sum(theirs[name.replace(f".{module}.", f".{m}.")] for m in FUSED[module])
        worst = max(worst, ((grad - want).abs().max() / want.abs().max()).item())
    print(f"\nllama {scheme}: max relative |grad - peft grad| = {worst:.1e}")
    assert worst <= 1e-4


def test_base_frozen_names_unchanged_and_fresh_adapters_are_the_identity(sources):
    from bridge.peft import adapted_linears, adapter_parameters, has_adapters, is_adapter_param

    _, plain = _build(sources / "llama", None)
    _, chunk = _build(sources / "llama", _peft("dora", target_modules=["linear_qkv", "linear_fc2"]))
    base_names = [n for n, _ in plain.named_parameters()]
    names = [n for n, _ in chunk.named_parameters()]
    assert [n for n in names if not is_adapter_param(n)] == base_names
    assert {n for n in names if is_adapter_param(n)} == {
        f"decoder.layers.{i}.{m}_adapter.{p}"
        for i in range(2)
        for m in ("self_attention.linear_qkv", "mlp.linear_fc2")
        for p in ("linear_in.weight", "linear_out.weight", "weight_magnitude")
    }
    for name, p in chunk.named_parameters():
        assert p.requires_grad == is_adapter_param(name), name
    assert len(adapter_parameters([chunk])) == 12 and has_adapters([chunk]) and not has_adapters([plain])
    # B = 0 and m = ||W||: the model computes what it computed before
    assert torch.allclose(megatron_logits(chunk, tokens()), megatron_logits(plain, tokens()), atol=1e-6)
    item = adapted_linears([chunk])[0]
    assert item.name == "decoder.layers.0.self_attention.linear_qkv"
    assert torch.allclose(item.adapter.weight_magnitude, item.base.weight.norm(dim=1))
    # xavier normal A: std sqrt(2 / (in + r)), different per layer
    a0, a1 = (
        x.adapter.linear_in.weight for x in adapted_linears([chunk]) if x.adapter.target == "linear_qkv"
    )
    assert abs(a0.std().item() / (2 / (64 + 4)) ** 0.5 - 1) < 0.15 and not torch.equal(a0, a1)
    # conversion of base weights ignores the adapters
    from bridge import AutoBridge

    exported = dict(AutoBridge.from_hf_pretrained(sources / "llama").export_hf_weights([chunk]))
    assert set(exported) == set(read_tensors(sources / "llama"))
    with pytest.raises(ConfigError, match="already has PEFT adapters"):
        from bridge.peft import apply_peft

        apply_peft([chunk], _peft("lora"), seed=1)


def test_same_seed_same_adapters_and_sharded_state_dict(sources):
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory

    from bridge.checkpoint.save_load import model_sharded_state_dict

    _, c1 = _build(sources / "qwen3", _peft("dora"), seed=3)
    _, c2 = _build(sources / "qwen3", _peft("dora"), seed=3)
    _, c3 = _build(sources / "qwen3", _peft("dora"), seed=4)
    s1, s2, s3 = (_snapshot(c) for c in (c1, c2, c3))
    key = "decoder.layers.1.self_attention.linear_proj_adapter.linear_in.weight"
    assert torch.equal(s1[key], s2[key]) and not torch.equal(s1[key], s3[key])

    (sharded,) = model_sharded_state_dict([c1], "adapters").values()
    assert len(sharded) == 2 * 4 * 3  # layers x targets x (A, B, m)
    # layers are stacked along a prepended axis (global layer number), as the base weights are
    qkv_b = sharded["decoder.layers.1.self_attention.linear_qkv_adapter.linear_out.weight"]
    assert (
        isinstance(qkv_b, ShardedTensor)
        and qkv_b.key == "decoder.layers.self_attention.linear_qkv_adapter.linear_out.weight"
    )
    assert qkv_b.global_offset[0] == 1 and qkv_b.prepend_axis_num == 1
    fc1_b = sharded["decoder.layers.0.mlp.linear_fc1_adapter.linear_out.weight"]
    assert isinstance(fc1_b, ShardedTensorFactory)  # gate / up halves, as linear_fc1.weight
    assert all("_adapter." in k for k in sharded)


def test_moe_expert_adapters_match_peft(tmp_path):
    """linear_fc1 / linear_fc2 in a MoE layer adapt every routed expert (Megatron-Bridge's meaning); the
    adapter folder names them per expert (`mlp.experts.<e>.gate_proj`, ...), which peft converts onto
    transformers' fused Qwen3-MoE experts (target_parameters) with bridge's logits, and the merged export
    equals peft's merge_and_unload."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "moe"
    save_hf_model(
        "qwen3_moe", folder, with_tokenizer=False, mlp_only_layers=[]
    )  # every layer MoE, as Qwen3-MoE's
    bridge, chunk = _build(folder, _peft("lora"))
    moe_layers = [layer for layer in chunk.decoder.layers if hasattr(layer.mlp, "experts")]
    trainable = [n for n, p in chunk.named_parameters() if p.requires_grad and ".local_experts." in n]
    assert (
        moe_layers and len(trainable) == len(moe_layers) * chunk.config.num_moe_experts * 2 * 2
    )  # fc1/2, A/B
    experts = [p for n, p in chunk.named_parameters() if ".local_experts." in n and "_adapter." in n]
    assert all(p.allreduce is False for p in experts)  # reduced over the expert-data-parallel group
    a0, a1 = (
        chunk.decoder.layers[0].mlp.experts.local_experts[e].linear_fc1_adapter.linear_in.weight
        for e in (0, 1)
    )
    assert not torch.equal(a0, a1)  # each expert its own initial A
    _randomize(chunk)
    toks = tokens()
    ours = megatron_logits(chunk, toks)
    bridge.save_hf_adapter([chunk], tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["target_modules"] == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    n = moe_layers[0].layer_number - 1
    last = chunk.config.num_moe_experts - 1
    assert f"base_model.model.model.layers.{n}.mlp.experts.{last}.up_proj.lora_B.weight" in read_tensors(
        tmp_path / "adapter"
    )
    peft_model = _peft_model(folder, tmp_path / "adapter")
    wrapped = peft_model.base_model.model.model.layers[n].mlp.experts  # peft's LoRA on the fused experts
    assert type(wrapped).__name__ == "ParamWrapper", type(wrapped)
    ref = hf_logits(peft_model, toks)
    diff = (ours - ref).abs().max().item()
    print(f"\nqwen3_moe experts lora: max |bridge - peft| logits = {diff:.2e}")
    assert diff <= 1e-5, diff  # fp32, 2 layers: the same bound as the dense families'
    # the planner's adapter count (bridge.parallel.param_count: every routed expert's pair) equals the built
    # model's adapters (peft's differ: transformers keeps q / k / v and gate / up apart, one A each)
    from bridge.parallel.param_count import adapter_parameters

    settings = _peft("lora")
    shape = bridge.to_megatron_provider(load_weights=False).model_shape()
    built = sum(p.numel() for n, p in chunk.named_parameters() if "_adapter." in n)
    assert adapter_parameters(shape, settings.target_modules, settings.dim) == built
    base_logits = hf_logits(AutoModelForCausalLM.from_pretrained(folder), toks)
    assert (ref - base_logits).abs().max() > 1e-2  # the adapters matter
    bridge.save_hf_pretrained([chunk], tmp_path / "merged")
    merged_ref = peft_model.merge_and_unload().state_dict()
    merged = read_tensors(tmp_path / "merged")
    for layer in range(
        len(moe_layers)
    ):  # peft merges into transformers' fused experts: compare expert by expert
        x = f"model.layers.{layer}.mlp.experts"
        for e in range(chunk.config.num_moe_experts):
            gate_up = torch.cat([merged[f"{x}.{e}.gate_proj.weight"], merged[f"{x}.{e}.up_proj.weight"]])
            merged[f"{x}.gate_up_proj#{e}"], merged_ref[f"{x}.gate_up_proj#{e}"] = (
                gate_up,
                merged_ref[f"{x}.gate_up_proj"][e],
            )
            merged[f"{x}.down_proj#{e}"] = merged[f"{x}.{e}.down_proj.weight"]
            merged_ref[f"{x}.down_proj#{e}"] = merged_ref[f"{x}.down_proj"][e]
    compared = [k for k in merged if k in merged_ref]
    assert len([k for k in compared if "#" in k]) == 2 * len(moe_layers) * chunk.config.num_moe_experts
    wdiff = max((merged[k] - merged_ref[k]).abs().max().item() for k in compared)
    assert wdiff <= 1e-6, wdiff  # fp32 W + s B A, summed in a different order
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", attn_implementation="eager").eval()
    assert (hf_logits(reloaded, toks) - ref).abs().max().item() <= 1e-5


def test_expert_adapters_refused_where_peft_or_bridge_cannot_carry_them(tmp_path):
    from bridge import AutoBridge
    from bridge.peft import apply_peft

    save_hf_model("qwen2_moe", tmp_path / "shared", with_tokenizer=False)  # shared experts: not covered yet
    provider = AutoBridge.from_hf_pretrained(tmp_path / "shared").to_megatron_provider(load_weights=False)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    with pytest.raises(ConfigError, match="shared experts.*linear_qkv,linear_proj"):
        apply_peft(chunks, _peft("lora"), seed=0)
    assert all(p.requires_grad for p in chunks[0].parameters())  # refused before changing anything
    # the test family's layer 1 is dense: peft 0.21.2 would load its MLP without adapters (measured: logits
    # 4.3 apart); DoRA: peft's fused-expert LoRA has none. Both refused before anything is written.
    save_hf_model("qwen3_moe", tmp_path / "mixed", with_tokenizer=False)
    for scheme, message in (
        ("lora", "dense MLP layers have adapters on down_proj, gate_proj, up_proj"),
        ("dora", "without DoRA"),
    ):
        bridge, chunk = _build(tmp_path / "mixed", _peft(scheme))
        with pytest.raises(ConfigError, match=message):
            bridge.save_hf_adapter([chunk], tmp_path / "adapter")
        assert not (tmp_path / "adapter").exists()


# MoE families whose attention adapters are checked against peft (experts: above):
# olmoe: q/k norms over whole projections after the adapted q/k projections; gpt_oss: biased q/k/v/o
# projections, attention sinks; glm4_moe: attention biases; minimax_m2: whole-projection q/k norms;
# ernie4_5_moe: interleaved RoPE and a dense first layer; exaone_moe: per-head q/k norms after the adapted
# q/k projections, a RoPE-less global layer.
MOE_ATTENTION_FAMILIES = ("olmoe", "gpt_oss", "glm4_moe", "minimax_m2", "ernie4_5_moe", "exaone_moe")


@pytest.mark.parametrize("family", MOE_ATTENTION_FAMILIES)
def test_moe_family_attention_adapter_matches_peft(family, tmp_path):
    from transformers import AutoModelForCausalLM

    folder = tmp_path / family
    save_hf_model(family, folder, with_tokenizer=False)
    bridge, chunk = _build(folder, _peft("lora", target_modules=["linear_qkv", "linear_proj"]))
    _randomize(chunk)
    toks = tokens()
    ours = megatron_logits(chunk, toks)
    bridge.save_hf_adapter([chunk], tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    peft_model = _peft_model(folder, tmp_path / "adapter")
    ref = hf_logits(peft_model, toks)
    assert (ours - ref).abs().max().item() <= logits_tolerance(ref, peft_model.config)
    base_logits = hf_logits(AutoModelForCausalLM.from_pretrained(folder), toks)
    assert (ref - base_logits).abs().max() > 1e-2  # the adapters matter


def test_dropout_only_in_training(sources):
    _, chunk = _build(sources / "llama", _peft("lora", dropout=0.5))
    _randomize(chunk)
    toks = tokens()
    eval_logits = megatron_logits(chunk, toks)
    assert torch.equal(eval_logits, megatron_logits(chunk, toks))
    chunk.train()
    assert not torch.allclose(megatron_logits(chunk, toks), eval_logits, atol=1e-3)
    chunk.eval()
    assert torch.equal(megatron_logits(chunk, toks), eval_logits)


# ---- Transformer Engine's fused norm + column linear, with a stand-in module (TE is not installed) ----


class FakeLayerNormColumnLinear(torch.nn.Module):
    """TELayerNormColumnParallelLinear's interface at TP=1: norm(x) then x W^T (+ b), returns (out, None)."""

    def __init__(self, normalization: str, zero_centered: bool, eps: float = 1e-5):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.normalization, self.zero_centered, self.eps = normalization, zero_centered, eps
        self.weight = torch.nn.Parameter(torch.randn(24, 16, generator=gen) * 0.2)
        self.bias = torch.nn.Parameter(torch.randn(24, generator=gen) * 0.1)
        self.layer_norm_weight = torch.nn.Parameter(torch.rand(16, generator=gen) + 0.5)
        if normalization == "LayerNorm":
            self.layer_norm_bias = torch.nn.Parameter(torch.randn(16, generator=gen) * 0.1)

    def normed(self, x):
        g = self.layer_norm_weight + (1.0 if self.zero_centered else 0.0)
        if self.normalization == "RMSNorm":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * g
        return F.layer_norm(x, (16,), g, self.layer_norm_bias, self.eps)

    def forward(self, x):
        return F.linear(self.normed(x), self.weight, self.bias), None


@pytest.mark.parametrize("scheme", ["lora", "dora"])
@pytest.mark.parametrize("normalization,zero_centered", [("RMSNorm", False), ("LayerNorm", True)])
def test_te_fused_norm_linear_gets_the_normed_input(normalization, zero_centered, scheme, sources):
    from bridge.peft.apply import attach_adapter, build_adapter

    _build(sources / "llama", None)  # the TP=1 groups (and RNG tracker) of this module's tests
    holder = torch.nn.Module()
    holder.linear_qkv = base = FakeLayerNormColumnLinear(normalization, zero_centered)
    config = SimpleNamespace(
        normalization=normalization, layernorm_epsilon=1e-5, layernorm_zero_centered_gamma=zero_centered,
        sequence_parallel=False, gated_linear_unit=False,
    )  # fmt: skip
    adapter = build_adapter(base, "linear_qkv", _peft(scheme), config, layer_number=1)
    attach_adapter(holder, "linear_qkv", adapter, seed=0)
    assert adapter.norm is not None
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        adapter.linear_out.weight.copy_(torch.randn(adapter.linear_out.weight.shape, generator=gen))
        if scheme == "dora":
            adapter.weight_magnitude.mul_(1.3)
    x = torch.randn(5, 2, 16, generator=gen)
    got, bias = holder.linear_qkv(x)
    assert bias is None
    a, b, s = adapter.linear_in.weight, adapter.linear_out.weight, adapter.scale
    n = base.normed(x)
    if scheme == "lora":
        want = F.linear(n, base.weight + s * b @ a, base.bias)
    else:  # peft's DoRA: the bias stays outside the rescaling
        w = base.weight + s * b @ a
        want = F.linear(n, adapter.weight_magnitude.unsqueeze(1) / w.norm(dim=1, keepdim=True) * w, base.bias)
    assert (got - want).abs().max().item() <= 1e-5
    # merged weight reproduces the adapted layer on normed inputs
    merged = adapter.merged_weight(base)
    assert (F.linear(n, merged, base.bias) - got).abs().max().item() <= 1e-5


def test_the_plan_takes_expert_adapters_where_the_experts_are_linears():
    """linear_fc1 / linear_fc2 on a MoE model adapt every routed expert (above): the plan takes them where
    the experts run as one linear each (Megatron-Core's sequential experts: on CPU, or
    model.moe_grouped_gemm=false), and refuses grouped-GEMM experts and shared experts with the fix."""
    from bridge.config.finetune_rules import check_peft
    from bridge.config.overrides import apply_overrides
    from bridge.errors import ConfigError
    from recipes import get_recipe

    every = "peft.target_modules=[linear_qkv,linear_proj,linear_fc1,linear_fc2]"
    start = "checkpoint.pretrained_checkpoint=/a/hf/folder"  # (the rule only reads that one is given)
    cfg = apply_overrides(get_recipe("qwen3_30b_a3b_peft_config")(), [every, start])
    assert cfg.model.moe_grouped_gemm  # requested; Transformer Engine's, so inactive on CPU
    check_peft(cfg, running=frozenset())
    with pytest.raises(ConfigError, match="model.moe_grouped_gemm=true \\(active here\\) the experts are "
                                          "grouped-GEMM weights.*Fix: set model.moe_grouped_gemm=false"):  # fmt: skip
        check_peft(cfg, running=frozenset({"moe_grouped_gemm"}))
    check_peft(apply_overrides(cfg, ["model.moe_grouped_gemm=false"]), running=frozenset())
    shared = apply_overrides(get_recipe("deepseek_v2_lite_peft_config")(), [
        "peft.target_modules=[linear_q_proj,linear_proj,linear_fc1]", start])  # fmt: skip
    with pytest.raises(ConfigError, match="also hold shared experts"):
        check_peft(shared, running=frozenset())
