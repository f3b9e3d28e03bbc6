"""Nothing dropped in silence, and multi-token prediction (MTP) in and out of Hugging Face folders (TP=1).

A checkpoint tensor no parameter maps is an error naming it, or (omit_unmapped) a listed omission that
an export carries back; DeepSeek-V3 / GLM-4.5 / GLM-4.7-Flash MTP layers, named as the published checkpoints
(tests/functional/workers/mtp_checkpoint.py), import into Megatron-Core's MTP block and export
bit-identically; a model built with mtp_num_layers=0 lists them as left out and the export carries them.
"""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from bridge.errors import ConfigError
from tests.functional.workers.convert_models import read_tensors
from tests.functional.workers.mtp_checkpoint import (
    OWN_LAYOUT,
    checkpoint_name,
    longer_overrides,
    save_mtp_folder,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


_FOLDERS: dict = {}


def _mtp_folder(tmp_path_factory, family: str):
    """`family`'s tiny folder with one MTP layer (made once per module)."""
    if family not in _FOLDERS:
        folder = tmp_path_factory.mktemp(f"{family}_mtp") / "hf"
        model, extra = save_mtp_folder(family, folder)
        _FOLDERS[family] = folder, model, extra
    return _FOLDERS[family]


@pytest.fixture(scope="module")
def v3_mtp(tmp_path_factory):
    return _mtp_folder(tmp_path_factory, "deepseek_v3")


# DeepSeek-V3's MTP layer, GLM-4.7-Flash's in the same layout (MLA + GLM's router in the MTP layer), and
# Qwen3-Next's under mtp.* (a gated softmax-attention + MoE layer behind Gated DeltaNet layers; config.json
# counts none, so model.mtp_num_layers=1 builds it)
@pytest.fixture(scope="module", params=["deepseek_v3", "glm4_moe_lite", "qwen3_next"])
def mtp_folder(request, tmp_path_factory):
    return _mtp_folder(tmp_path_factory, request.param)


def _build(folder, **fields):
    from bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(folder)
    omit = fields.pop("omit_unmapped", False)
    provider = bridge.to_megatron_provider(load_weights=True, omit_unmapped=omit)
    for k, v in fields.items():
        setattr(provider, k, v)
    return bridge, provider, provider.provide_distributed_model(wrap_with_ddp=False)


def _add(folder, extra):
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    save_file({**load_file(str(path)), **extra}, str(path), metadata={"format": "pt"})


def test_unknown_tensor_is_an_error_and_omit_unmapped_lists_it_and_export_carries_it(
    family_sources, tmp_path, caplog
):
    from bridge import AutoBridge

    folder = tmp_path / "llama"
    shutil.copytree(family_sources["llama"][0], folder)
    extra = {f"model.layers.0.extra{i}.weight": torch.full((3,), float(i)) for i in range(7)}
    _add(folder, extra)
    with pytest.raises(
        ConfigError, match=r"7 tensor\(s\) the model does not use: model\.layers\.0\.extra0"
    ) as e:
        AutoBridge.import_ckpt(folder, tmp_path / "never")
    assert "(7 in all)" in str(e.value) and "--omit-unmapped" in str(e.value)
    assert not (tmp_path / "never").exists()

    caplog.set_level(logging.WARNING)
    AutoBridge.import_ckpt(folder, tmp_path / "mcore", omit_unmapped=True)
    assert all(name in caplog.text for name in extra) and "omit_unmapped=True" in caplog.text
    # the export from the imported checkpoint's hf_assets (names only) cannot be silently smaller ...
    imported = AutoBridge.from_megatron_checkpoint(tmp_path / "mcore")
    with pytest.raises(ConfigError, match=r"7 tensor\(s\) fewer than its source checkpoint"):
        imported.export_ckpt(tmp_path / "mcore", tmp_path / "small")
    # ... unless asked (listed), and with the source folder the omitted tensors are carried unchanged
    caplog.clear()
    imported.export_ckpt(tmp_path / "mcore", tmp_path / "small", omit_unmapped=True)
    assert set(read_tensors(folder)) - set(read_tensors(tmp_path / "small")) == set(extra)
    assert all(name in caplog.text for name in extra)
    AutoBridge.from_hf_pretrained(folder).export_ckpt(tmp_path / "mcore", tmp_path / "full")
    src, out = read_tensors(folder), read_tensors(tmp_path / "full")
    assert src.keys() == out.keys() and all(torch.equal(src[k], out[k]) for k in src)


@pytest.mark.parametrize(
    "family, names, reason",
    [
        (  # the published ERNIE-4.5-*-A*B-PT names (transformers' MtpModel reads them)
            "ernie4_5_moe",
            ("model.mtp_emb_norm.0.weight", "model.mtp_linear_proj.0.weight", "model.mtp_block.0.mlp.up_proj.weight"),
            r"ERNIE 4\.5's multi-token-prediction layer \(model\.mtp_\*\) has a dense MLP .* reuses model\.norm",
        ),
        (  # the published K-EXAONE names (Megatron-Bridge's EXAONE-MoE bridge maps them)
            "exaone_moe",
            ("mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.layers.0.mlp.gate_proj.weight"),
            r"EXAONE-MoE's multi-token-prediction layer \(mtp\.\*\) has a dense MLP, while Megatron-Core's MTP "
            r"block repeats the last \(MoE\) decoder layer",
        ),
    ],
    ids=["ernie4_5_moe", "exaone_moe"],
)  # fmt: skip
def test_mtp_layers_megatron_core_computes_differently_are_refused_with_the_reason(
    family, names, reason, family_sources, tmp_path
):
    from bridge import AutoBridge

    folder = tmp_path / family
    shutil.copytree(family_sources[family][0], folder)
    _add(folder, {name: torch.ones(4) for name in names})
    with pytest.raises(ConfigError, match=reason) as e:
        AutoBridge.import_ckpt(folder, tmp_path / "never")
    assert all(name in str(e.value) for name in names) and "--omit-unmapped" in str(e.value)


def _mtp_fields(hf) -> dict:
    """Qwen3-Next's config.json counts no MTP layer: the run asks for the checkpoint's one."""
    return {"mtp_num_layers": 1} if hf.config.model_type in OWN_LAYOUT else {}


def test_mtp_round_trip_is_bit_identical(mtp_folder, tmp_path):
    folder, hf, extra = mtp_folder
    bridge, provider, chunks = _build(folder, **_mtp_fields(hf))
    assert provider.mtp_num_layers == 1 and len(extra) > 25  # a full MoE layer + the MTP modules
    model = chunks[0]
    assert len(model.mtp.layers) == 1
    bridge.save_hf_pretrained(chunks, tmp_path / "out")
    src, out = read_tensors(folder), read_tensors(tmp_path / "out")
    assert src.keys() == out.keys()
    assert [k for k in src if not torch.equal(src[k], out[k])] == []
    # every MTP tensor went through a Megatron parameter: the MTP block holds them
    params = dict(model.named_parameters())
    eh_proj = checkpoint_name(hf.config.model_type, hf.config.num_hidden_layers, 0, "eh_proj.weight")
    assert torch.equal(params["mtp.layers.0.eh_proj.weight"], extra[eh_proj])


def test_qwen3_next_mtp_left_out_unless_asked_and_carried_back(tmp_path_factory, tmp_path, caplog):
    """Built without MTP (config.json counts none), a Qwen3-Next folder's mtp.* tensors are listed as left
    out and the export carries them back byte for byte; model.mtp_num_layers=2 is refused (one layer)."""
    folder, _, extra = _mtp_folder(tmp_path_factory, "qwen3_next")
    caplog.set_level(logging.WARNING)
    bridge, provider, chunks = _build(folder)
    assert not provider.mtp_num_layers
    assert "fewer model.mtp_num_layers" in caplog.text and all(n in caplog.text for n in extra)
    bridge.save_hf_pretrained(chunks, tmp_path / "out")
    src, out = read_tensors(folder), read_tensors(tmp_path / "out")
    assert src.keys() == out.keys() and all(torch.equal(src[k], out[k]) for k in src)
    with pytest.raises(ConfigError, match=r"model\.mtp_num_layers=2: a qwen3_next checkpoint holds one"):
        _build(folder, mtp_num_layers=2)


def test_mtp_copies_must_equal_the_main_tensors(v3_mtp, tmp_path):
    folder = tmp_path / "v3"
    shutil.copytree(v3_mtp[0], folder)
    _add(
        folder,
        {
            "model.layers.2.shared_head.head.weight": torch.zeros_like(
                v3_mtp[2]["model.layers.2.shared_head.head.weight"]
            )
        },
    )
    with pytest.raises(
        ConfigError, match=r"'model\.layers\.2\.shared_head\.head\.weight' differs from 'lm_head\.weight'"
    ):
        _build(folder)


def test_mtp_switched_off_lists_the_layer_and_export_carries_it_back(v3_mtp, tmp_path, caplog):
    folder, _, extra = v3_mtp
    caplog.set_level(logging.WARNING)
    from bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=True)
    provider.mtp_num_layers = None  # a finetune without MTP (model.mtp_num_layers=0)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    assert not hasattr(chunks[0], "mtp") or chunks[0].mtp is None or not chunks[0].mtp_process
    assert "fewer model.mtp_num_layers" in caplog.text and all(n in caplog.text for n in extra)
    bridge.save_hf_pretrained(chunks, tmp_path / "out")
    src, out = read_tensors(folder), read_tensors(tmp_path / "out")
    assert src.keys() == out.keys() and all(torch.equal(src[k], out[k]) for k in src)


def test_mtp_with_gated_deltanet_needs_a_softmax_last_layer(family_sources):
    """Megatron-Core's MTP layer repeats the last decoder layer; hybrid checkpoints' MTP layers use softmax
    attention, so a Gated DeltaNet last layer (3 layers, a softmax one every 2nd: linear last) is refused."""
    from bridge import AutoBridge

    provider = AutoBridge.from_hf_pretrained(family_sources["qwen3_next"][0]).to_megatron_provider()
    assert provider.linear_attention_freq == 2
    provider.num_layers, provider.mtp_num_layers = 3, 1
    with pytest.raises(ConfigError, match=r"model\.mtp_num_layers=1 with Gated DeltaNet: .*num_layers=3"):
        provider.provide_distributed_model(wrap_with_ddp=False)


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def test_mtp_loss_equals_the_published_formula_over_the_checkpoint_tensors(mtp_folder, tmp_path):
    """DeepSeek-V3 report sec. 2.2, depth k = 1 (D = 1): h'_i = M [RMSNorm(Emb(t_{i+1})); RMSNorm(h_i)]
    with h_i the main model's output representation (after its final norm) and the published eh_proj's
    input order (embedding first, as inference engines read the released checkpoints), then the
    depth's transformer layer, the shared_head norm and the shared output head; the loss is the
    cross-entropy against t_{i+2} (tokens shifted by k + 1), averaged, and enters the objective x lambda / D.

    Computed in plain torch over the checkpoint's own tensors: h_i and the depth's layer are transformers'
    DeepseekV3 modules holding the folder's weights (the layer is model.layers.<num_hidden_layers>, read by
    transformers as one more decoder layer; Qwen3-Next's mtp.layers.0 is read under that name, and its norms
    scale by 1 + weight as Qwen3NextRMSNorm does); nothing from bridge."""
    from megatron.core.transformer.multi_token_prediction import MTPLossAutoScaler, MTPLossLoggingHelper
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    folder, hf, _ = mtp_folder
    family = hf.config.model_type
    n, eps = hf.config.num_hidden_layers, hf.config.rms_norm_eps
    longer = longer_overrides(hf.config, 1)  # the folder read as its architecture one layer longer
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, hf.config.vocab_size, (2, 17), generator=g)
    toks, labels, s = x[:, :16], x[:, 1:], 16

    # --- the reference
    t = load_file(str(folder / "model.safetensors"))

    def name(rest: str) -> str:  # the checkpoint's name of the MTP layer's tensor `rest`
        return checkpoint_name(family, n, 0, rest)

    def scale(w):
        return 1.0 + w if family == "qwen3_next" else w

    ref_folder = folder
    if family in OWN_LAYOUT:  # the MTP layer under the name transformers reads as one more decoder layer
        ref_folder = tmp_path / "as_layer_n"
        ref_folder.mkdir()
        shutil.copy(folder / "config.json", ref_folder)
        prefix = name("")
        renamed = {
            f"model.layers.{n}.{k.removeprefix(prefix)}": v for k, v in t.items() if k.startswith(prefix)
        }
        main = {k: v for k, v in t.items() if not k.startswith("mtp.")}
        save_file({**main, **renamed}, str(ref_folder / "model.safetensors"), metadata={"format": "pt"})
    ref = AutoModelForCausalLM.from_pretrained(ref_folder, attn_implementation="eager", **longer)
    ref = ref.float().eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        ref.model.layers = ref.model.layers[:n]  # the main model: layers 0 .. n-1
        h = ref.model(toks).last_hidden_state[:, : s - 1]  # h_i (after the final norm) whose t_{i+2} exists
    eh = t[name("eh_proj.weight")].clone().requires_grad_(True)
    emb = _rms(t["model.embed_tokens.weight"][toks[:, 1:s]], scale(t[name("enorm.weight")]), eps)
    hh = _rms(h, scale(t[name("hnorm.weight")]), eps)
    inp = torch.cat([emb, hh], -1) @ eh.T
    layer = (
        AutoModelForCausalLM.from_pretrained(ref_folder, attn_implementation="eager", **longer)
        .float()
        .eval()
        .model
    )
    pos = torch.arange(s - 1)[None].expand(2, -1)
    cos_sin = layer.rotary_emb(inp, pos)
    mask = torch.full((s - 1, s - 1), float("-inf")).triu(1)[None, None].expand(2, 1, -1, -1)
    out = layer.layers[n](inp, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
    out = out[0] if isinstance(out, tuple) else out
    head = t.get(name("shared_head.head.weight"), t["lm_head.weight"])  # Qwen3-Next keeps no copy
    logits = _rms(out, scale(t[name("shared_head.norm.weight")]), eps) @ head.T
    ref_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 2:].reshape(-1))

    # --- bridge: the MTP block of the imported model, in training mode (the MTP loss is a training loss)
    # (without the experts' load-balancing loss, another term of the objective whose gradient also
    # reaches eh_proj through the MTP layer's router)
    _, provider, chunks = _build(folder, moe_aux_loss_coeff=0.0, **_mtp_fields(hf))
    model = chunks[0]
    assert provider.hidden_dropout == 0 and provider.attention_dropout == 0
    lam = provider.mtp_loss_scaling_factor
    model.train()
    MTPLossLoggingHelper.tracker.clear()
    lm = model(toks, torch.arange(s)[None].expand(2, -1), None, labels=labels, loss_mask=torch.ones(2, s))
    tracker = MTPLossLoggingHelper.tracker  # megatron-core 0.16: "values", 0.19: "loss_values"
    tracked = tracker["loss_values" if "loss_values" in tracker else "values"][0].item()
    MTPLossLoggingHelper.tracker.clear()
    # fp32, three layers deep, a loss near log(250) = 5.5 summed in different orders: 2e-6 relative
    assert abs(tracked - ref_loss.item()) <= 1e-5 * abs(ref_loss.item()), (tracked, ref_loss.item())
    # the gradient the MTP loss sends into eh_proj is lambda / D times the formula's
    # One micro batch: scale 1 (a pipeline schedule sets 1 / micro batches, and a run before leaves it set).
    MTPLossAutoScaler.set_loss_scale(torch.ones(1))
    # The LM loss adds nothing: only MTPLossAutoScaler's term reaches the MTP block.
    lm.sum().mul(0).backward()
    (lam * ref_loss).backward()
    got = model.mtp.layers[0].eh_proj.weight.grad
    rel = ((got - eh.grad).norm() / eh.grad.norm()).item()
    print(f"MTP loss {tracked:.7f} formula {ref_loss.item():.7f}; eh_proj grad relative error {rel:.2e}")
    # fp32 backward through MLA, the routed experts and the 250-way softmax: 1e-5 of the gradient's norm
    assert rel <= 1e-5, rel
