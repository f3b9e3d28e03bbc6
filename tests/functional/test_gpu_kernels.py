"""With CUDA: the GPU kernels bridge's runs can switch on, each checked against the plain path.

(a) a model built on Transformer Engine's layer spec gives the local spec's outputs (same weights: the TE
    model's parameters copied into the local one by canonical name, bridge.conversion.model_params), at
    bf16 tolerance, logits, loss and gradients;
(b) a bf16 training run with every fusion switch of Megatron-Core's TransformerConfig on (as dotted
    `model.` overrides of run_recipe.py under torchrun, one process) gives finite losses;
(c) Megatron-Core's fused vocab-parallel cross entropy (`native`: megatron.core.fusions.fused_cross_entropy,
    `te`: Transformer Engine's kernel) equals the unfused megatron.core.tensor_parallel one on the same
    logits and labels (one-rank process group), loss and gradient.

All `gpu`-marked (tests/conftest.py skips them without CUDA: "needs CUDA"); the ones that need Transformer
Engine (or apex) skip with that reason when it is absent. One check runs everywhere: the fusion overrides
of (b) pass the dry run planned for CUDA (field names and values the provider accepts).
"""

from __future__ import annotations

import importlib.util
import math
import re

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, torchrun

RUN_RECIPE = REPO_ROOT / "scripts/training/run_recipe.py"
RECIPE = "llama32_1b_pretrain_config"
# Small enough to build in seconds, big enough for the GPU kernels' shape rules (head size 64).
SHAPE = dict(
    num_layers=2, hidden_size=256, ffn_hidden_size=512, num_attention_heads=4, num_query_groups=2,
    kv_channels=64, vocab_size=1024, seq_length=128,
)  # fmt: skip
SHAPE_OVERRIDES = [f"model.{k}={v}" for k, v in SHAPE.items()]
# Every fusion switch the provider exposes (Megatron-Core TransformerConfig fields).
FUSIONS_ON = [
    "model.bias_activation_fusion=True", "model.masked_softmax_fusion=True", "model.persist_layer_norm=True",
    "model.bias_dropout_fusion=True", "model.apply_rope_fusion=True", "model.gradient_accumulation_fusion=True",
    "model.cross_entropy_loss_fusion=True", "model.cross_entropy_fusion_impl=te",
]  # fmt: skip
RUN = [
    "train.train_iters=3", "train.global_batch_size=4", "train.micro_batch_size=2",
    "scheduler.lr_warmup_iters=0", "validation.eval_interval=0", "validation.eval_iters=0",
    "logger.log_interval=1", "checkpoint.save=null", "checkpoint.save_interval=0", "logger.tensorboard_dir=null",
]  # fmt: skip


def require_transformer_engine(what: str) -> None:
    from bridge.models.specs import use_transformer_engine

    if not use_transformer_engine():
        pytest.skip(f"Transformer Engine is not installed (or does not import with CUDA): {what}")


@pytest.fixture
def one_rank():
    """torch.distributed (NCCL) and Megatron-Core's groups for one rank, torn down afterwards."""
    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    runtime.initialize_distributed(ParallelLayout(world_size=1))
    try:
        yield
    finally:
        runtime.destroy_distributed()


# ---- (a) Transformer Engine spec == local spec ------------------------------------------------------------


def _provider():
    from bridge.models.llama.presets import llama32_1b

    provider = llama32_1b()
    for name, value in SHAPE.items():
        setattr(provider, name, value)
    provider.bf16, provider.params_dtype = True, "bf16"
    return provider


@pytest.mark.gpu
def test_te_spec_model_equals_local_spec_model(one_rank, monkeypatch):
    require_transformer_engine("no TE spec to compare with the local one")
    from bridge.models import specs
    from bridge.parallel.wrappers import unwrap

    (te_model,) = _provider().provide_distributed_model(wrap_with_ddp=False)
    assert specs.uses_te_spec(_provider().layer_variant())
    monkeypatch.setattr(specs, "use_transformer_engine", lambda: False)  # the local spec from here on
    (local_model,) = _provider().provide_distributed_model(wrap_with_ddp=False)
    te_core, local_core = unwrap(te_model), unwrap(local_model)
    te_kinds = {type(m).__name__ for m in te_core.modules()}
    local_kinds = {type(m).__name__ for m in local_core.modules()}
    assert any(k.startswith("TE") for k in te_kinds), te_kinds
    assert not any(k.startswith("TE") for k in local_kinds), local_kinds

    copy_and_compare(te_model, local_model, "cuda")


def copy_and_compare(model_a, model_b, device) -> None:
    """Copy model_a's weights into model_b (matched by canonical name: TE's fused-norm names become the
    local spec's), then compare logits, loss and gradients on one random batch at bf16 tolerance."""
    import torch

    from bridge.conversion.model_params import Ranks, canonical_name
    from bridge.parallel.wrappers import unwrap

    core_a, core_b = unwrap(model_a), unwrap(model_b)
    one = Ranks(tp=0, tp_size=1, etp=0, etp_size=1, ep=0, ep_size=1)
    params_a = {canonical_name(core_a, n, one): p for n, p in core_a.named_parameters()}
    params_b = {canonical_name(core_b, n, one): p for n, p in core_b.named_parameters()}
    assert sorted(params_a) == sorted(params_b)
    with torch.no_grad():
        for name, param in params_b.items():
            assert param.shape == params_a[name].shape, name
            param.copy_(params_a[name])

    gen = torch.Generator(device=device).manual_seed(0)
    batch, seq, vocab = 2, SHAPE["seq_length"], SHAPE["vocab_size"]
    tokens = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    labels = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    position_ids = torch.arange(seq, device=device).unsqueeze(0).expand(batch, -1)
    out = {}
    for name, model in (("a", model_a), ("b", model_b)):
        model.eval()  # no dropout either way (Llama has none); same kernels as training otherwise
        with torch.no_grad():
            logits = model(tokens, position_ids, None).float()
        loss = model(tokens, position_ids, None, labels=labels).float().mean()
        loss.backward()
        out[name] = (
            logits,
            loss.detach(),
            {n: p.grad.float() for n, p in (params_a if name == "a" else params_b).items()},
        )

    (logits_a, loss_a, grads_a), (logits_b, loss_b, grads_b) = out["a"], out["b"]
    # bf16 through two layers with different kernels (TE's fused norm+linear and attention vs torch's):
    # agreement to a few bf16 ulps of the largest value, not bitwise.
    scale = logits_a.abs().max().item()
    assert (logits_a - logits_b).abs().max().item() <= 0.05 * scale + 1e-3
    assert ((logits_a - logits_b).norm() / logits_a.norm()).item() < 2e-2
    assert abs(loss_a.item() - loss_b.item()) < 1e-2 * abs(loss_a.item())
    for name, grad in grads_a.items():
        rel = ((grad - grads_b[name]).norm() / grad.norm().clamp_min(1e-12)).item()
        assert rel < 5e-2, f"{name}: gradient differs by {rel:.3g} (relative norm)"


# ---- (b) every fusion on, one bf16 run ----------------------------------------------------------------------


def _run_with(tmp_path, overrides):
    proc = torchrun(RUN_RECIPE, 1, "--recipe", RECIPE, *SHAPE_OVERRIDES, *overrides, *RUN)
    out = assert_ok(proc)
    assert "needs CUDA" not in out  # bf16 kept: no CPU fallback
    losses = [float(m.group(1)) for m in re.finditer(r"\| lm loss: ([^ ]+) \|", out)]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses), out[-3000:]
    return out


@pytest.mark.gpu
def test_bf16_run_with_every_fusion_on(tmp_path):
    require_transformer_engine("cross_entropy_fusion_impl=te and the fused RoPE need it")
    out = _run_with(tmp_path, FUSIONS_ON)
    # the plan's report (bridge.config.performance): every one runs, except the one whose kernel is absent
    expected = [o.removeprefix("model.") for o in FUSIONS_ON]
    if importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is None:  # apex: a pip-only machine
        expected.remove("gradient_accumulation_fusion=True")
        assert "inactive (needs apex's fused_weight_gradient_mlp_cuda" in out
    active = re.search(r"performance: active: (.*)", out)
    assert active is not None, out[-3000:]
    assert sorted(active.group(1).strip().split(", ")) == sorted(expected)


def test_fusion_overrides_pass_the_cuda_dry_run():
    # no GPU needed: the fields exist and take these values in the plan made for CUDA
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(RUN_RECIPE), "--recipe", RECIPE, "--dry-run", "--device", "cuda", "--world-size", "1",
         *SHAPE_OVERRIDES, *FUSIONS_ON, *RUN],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for override in FUSIONS_ON:
        key, value = override.removeprefix("model.").split("=")
        assert re.search(rf"^  {key}: {value.lower()}$", proc.stdout, flags=re.MULTILINE), key


# ---- (c) fused cross entropy == unfused ---------------------------------------------------------------------


def _te_cross_entropy():
    try:
        from megatron.core.extensions.transformer_engine import te_parallel_cross_entropy
    except ImportError:
        return None
    return te_parallel_cross_entropy


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["native", "te"])
def test_fused_cross_entropy_equals_unfused(impl, one_rank):
    import torch
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    tp_group = parallel_state.get_tensor_model_parallel_group()
    if impl == "native":
        from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy

        def fused(logits, labels):
            return fused_vocab_parallel_cross_entropy(logits, labels, tp_group)
    else:
        require_transformer_engine("no te cross entropy kernel")
        te_ce = _te_cross_entropy()
        if te_ce is None:
            pytest.skip("this Megatron-Core finds no Transformer Engine parallel_cross_entropy")

        def fused(logits, labels):
            return te_ce(logits, labels, tp_group, False)

    gen = torch.Generator(device="cuda").manual_seed(0)
    seq, batch, vocab = 256, 2, 32000  # Megatron-Core's layout: [s, b, V] logits, [s, b] labels
    base = (2 * torch.randn(seq, batch, vocab, device="cuda", generator=gen)).to(torch.bfloat16)
    labels = torch.randint(0, vocab, (seq, batch), device="cuda", generator=gen)
    upstream = torch.rand(seq, batch, device="cuda", generator=gen)  # a non-uniform loss weighting

    results = {}
    for name, fn in (("unfused", vocab_parallel_cross_entropy), ("fused", fused)):
        logits = base.clone().requires_grad_()  # TE's kernel writes its gradient into its input
        loss = fn(logits, labels)
        (loss.float() * upstream).sum().backward()
        results[name] = (loss.detach().float(), logits.grad)

    (ref_loss, ref_grad), (loss, grad) = results["unfused"], results["fused"]
    plain = torch.nn.functional.cross_entropy(base.float().view(-1, vocab), labels.view(-1), reduction="none")
    torch.testing.assert_close(ref_loss.view(-1), plain, rtol=1e-4, atol=1e-4)  # the reference itself
    torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-4)  # both compute in fp32
    assert grad.dtype == ref_grad.dtype == torch.bfloat16
    torch.testing.assert_close(grad, ref_grad)  # bf16 gradients: torch's bf16 tolerance
