"""optimizer.optimizer=muon: the plan's refusals, the dry run of a recipe, and Megatron-Core's Muon as
bridge builds it (bridge.training.optim.build_optimizer) against torch.optim.Muon on the same parameters.

The options that make the two compute the same thing: torch.optim.Muon's Newton-Schulz is 5 steps of
Keller Jordan's coefficients (3.4445, -4.7750, 2.0315) in bf16 = Megatron-Core's
muon_coefficient_type=simple, muon_num_ns_steps=5, muon_fp32_matmul_prec=medium; its
adjust_lr_fn="original" (lr * sqrt(max(1, out/in))) = muon_scale_mode=shape_scaling, and
"match_rms_adamw" (lr * 0.2 * sqrt(max(out, in))) = spectral with muon_extra_scale_factor=0.2; both use
decoupled weight decay (W * (1 - lr wd)) and the same EMA momentum / Nesterov. Megatron-Core
orthogonalizes the fused QKV weight's Q, K and V blocks separately (muon_split_qkv): the reference holds
those blocks as three torch parameters. Embeddings, norms and the output layer go to Adam in both.
"""

from __future__ import annotations

import math

import pytest

from bridge.config.checks.muon import MEGATRON_CORE_MIN, _release, check_muon, emerging_optimizers_version
from bridge.config.overrides import apply_overrides
from bridge.errors import ConfigError
from bridge.models.transformer_fields import INSTALLED_RELEASE

MUON = [
    "optimizer.optimizer=muon",
    "optimizer.use_distributed_optimizer=false",
    "distributed.overlap_param_gather=false",
]
MUON_RUNS = _release(INSTALLED_RELEASE) >= MEGATRON_CORE_MIN and emerging_optimizers_version() is not None
needs_muon = pytest.mark.skipif(
    not MUON_RUNS,
    reason=f"megatron-core {INSTALLED_RELEASE}: Muon is refused (test_refusals_name_the_reason)",
)


def _tiny(*overrides: str):
    from tests.functional.workers.train_common import tiny_config

    return tiny_config(*overrides)


def _refusal(cfg, **versions) -> str:
    with pytest.raises(ConfigError) as err:
        check_muon(cfg, **versions)
    return str(err.value)


def test_refusals_name_the_reason():
    cfg = _tiny(*MUON)
    ok = {"release": "0.19.2", "emerging": "0.3.0"}
    check_muon(cfg, **ok)  # the supported setting passes
    assert "megatron-core 0.16.1" in _refusal(cfg, release="0.16.1", emerging="0.3.0")
    assert "which is not installed" in _refusal(cfg, release="0.19.2", emerging="0.0")
    assert "which is 0.2.0 here" in _refusal(cfg, release="0.19.2", emerging="0.2.0")
    for extra, field in [
        (["distributed.strategy=fsdp2"], "distributed.strategy = 'fsdp2'"),
        (["distributed.strategy=ddp"], "distributed.strategy = 'ddp'"),
        (["optimizer.use_distributed_optimizer=true"], "optimizer.use_distributed_optimizer = True"),
        (["mixed_precision.precision=fp16_mixed"], "mixed_precision.precision = 'fp16_mixed'"),
        (["optimizer.muon_scale_mode=rms"], "optimizer.muon_scale_mode = 'rms'"),
        (["optimizer.muon_coefficient_type=custom"], "optimizer.muon_coefficient_type = 'custom'"),
        (["optimizer.muon_num_ns_steps=0"], "optimizer.muon_num_ns_steps = 0"),
        (["optimizer.muon_momentum=1.0"], "optimizer.muon_momentum = 1.0"),
    ]:
        message = _refusal(apply_overrides(cfg.copy(), extra), **ok)
        assert message.startswith(field) and "Fix:" in message, message
    # the one plan refuses it on a release without Muon, before anything starts
    if not MUON_RUNS:
        from bridge.config.run_plan import build_plan

        with pytest.raises(ConfigError, match="optimizer.optimizer = 'muon'"):
            build_plan(cfg, 1, cuda=False)


@needs_muon
def test_recipe_dry_run_with_muon(capsys):
    from tests.functional.test_run_recipe_dry_run import load_script

    script = load_script()
    code = script.main(
        ["--recipe", "llama32_1b_pretrain_config", "--dry-run", "--world-size", "8", *MUON,
         "optimizer.muon_nesterov=true", "optimizer.muon_extra_scale_factor=0.2"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert "optimizer: muon" in out and "muon_extra_scale_factor: 0.2" in out and "muon_nesterov: true" in out
    # without the distributed optimizer switched off: one error naming the field and the fix
    code = script.main(["--recipe", "llama32_1b_pretrain_config", "--dry-run", "optimizer.optimizer=muon"])
    out, err = capsys.readouterr()
    assert code == 2 and "use_distributed_optimizer = True" in err and "Fix:" in err, err[-2000:]


# --- Megatron-Core's Muon against torch.optim.Muon -------------------------------------------------------

U_BF16 = 2.0**-8  # bf16's unit roundoff (8 significant bits)
EPS_FP32 = 2.0**-23


def _exact_bf16_gradient(shape, gen):
    """A gradient whose Newton-Schulz input is the same bf16 matrix in both implementations: integer
    entries in [-1, 1] (exact in bf16) topped up by four entries (Lagrange's four squares) so that the
    Frobenius norm is a power of two. torch.optim.Muon rounds to bf16 and divides by the norm in bf16,
    Megatron-Core divides in fp32 and rounds: both divisions are exact here, so both start from the same
    bits and run the same bf16 matmuls."""
    import torch

    g = torch.randint(-1, 2, shape, generator=gen).double()
    flat = g.view(-1)
    flat[:4] = 0
    total = int((flat * flat).sum())
    target = 4 ** math.ceil(math.log(total + 1, 4))
    deficit = target - total
    a = next(
        (a, b, c, d)
        for a in range(math.isqrt(deficit), -1, -1)
        for b in range(math.isqrt(deficit - a * a), -1, -1)
        for c in range(math.isqrt(deficit - a * a - b * b), -1, -1)
        for d in [math.isqrt(deficit - a * a - b * b - c * c)]
        if a * a + b * b + c * c + d * d == deficit
    )
    flat[:4] = torch.tensor(a, dtype=torch.float64)
    assert float((g * g).sum().sqrt()) == 2 ** math.log(target, 4)
    return (g / 64).float()  # a power-of-two scale keeps it exact


def _well_conditioned_gradient(shape, gen):
    """Singular values in [0.5, 1]: Newton-Schulz converges on every direction, so bf16 rounding is not
    amplified by near-zero singular values (which bf16 cannot resolve: there the two implementations'
    roundings give different noise)."""
    import torch

    rows, cols = shape
    k = min(rows, cols)
    qa, _ = torch.linalg.qr(torch.randn(rows, k, generator=gen, dtype=torch.float64))
    qb, _ = torch.linalg.qr(torch.randn(cols, k, generator=gen, dtype=torch.float64))
    s = 0.5 + 0.5 * torch.rand(k, generator=gen, dtype=torch.float64)
    return ((qa * s) @ qb.T).float()


class _Reference:
    """torch.optim.Muon on copies of Megatron-Core's Muon parameters (QKV as its three blocks) and
    torch.optim.AdamW on the others, with the same learning rate and weight decay."""

    def __init__(self, model, muon_params, cfg, adjust_lr_fn):
        import torch

        c = model.config
        self.split = [
            c.num_attention_heads // c.num_query_groups * c.kv_channels,
            c.kv_channels,
            c.kv_channels,
        ]
        self.params, muon, decay, no_decay = {}, [], [], []
        muon_ids = {id(p) for p in muon_params}
        for name, p in model.named_parameters():
            is_muon, qkv = id(p) in muon_ids, bool(getattr(p, "is_qkv", False))
            copies = [torch.nn.Parameter(x.detach().clone()) for x in self.parts(p.detach(), qkv)]
            self.params[name] = (is_muon, qkv, copies)
            (muon if is_muon else decay if p.ndim == 2 else no_decay).extend(copies)
        o = cfg.optimizer
        self.muon = torch.optim.Muon(
            muon, lr=o.lr, weight_decay=o.weight_decay, momentum=o.muon_momentum,
            nesterov=o.muon_nesterov, ns_steps=o.muon_num_ns_steps, adjust_lr_fn=adjust_lr_fn,
        )  # fmt: skip
        self.adam = torch.optim.AdamW(
            [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=o.lr, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_eps,
        )  # fmt: skip

    def parts(self, t, qkv: bool) -> list:
        import torch

        if not qkv:
            return [t]
        groups = t.shape[0] // sum(self.split)
        blocks = torch.split(t.view(groups, sum(self.split), -1), self.split, dim=1)
        return [b.reshape(-1, t.shape[1]) for b in blocks]

    def joined(self, name: str, shape):
        import torch

        _, qkv, copies = self.params[name]
        if not qkv:
            return copies[0].detach()
        groups = shape[0] // sum(self.split)
        return torch.cat([c.detach().view(groups, -1, shape[1]) for c in copies], dim=1).view(shape)


def _run(overrides, adjust_lr_fn, make_gradient, steps=3):
    """(max |W_megatron - W_torch| over the Muon parameters after each step, the same over the Adam
    ones, the largest |lr * scale| of a Muon update, max |W| at the start)."""
    import torch

    from bridge.config.run_plan import build_plan
    from bridge.training.optim import build_optimizer, build_scheduler

    cfg = _tiny(
        *MUON, "optimizer.lr=0.02", "optimizer.weight_decay=0.1", "optimizer.clip_grad=0",
        "scheduler.lr_decay_style=constant", "scheduler.lr_warmup_iters=0",
        "scheduler.start_weight_decay=null", "scheduler.end_weight_decay=null", *overrides,
    )  # fmt: skip
    plan = build_plan(cfg, 1, cuda=False)
    torch.manual_seed(0)
    model = plan.provider.provide_distributed_model(wrap_with_ddp=False)[0]
    opt = build_optimizer(
        cfg.optimizer, [model], plan.precision, cfg.mixed_precision, use_distributed_optimizer=False
    )
    sched = build_scheduler(opt, cfg.optimizer, cfg.scheduler, plan.schedule)  # sets each group's lr and wd
    muon_params = [p for g in opt.chained_optimizers[0].optimizer.param_groups for p in g["params"]]
    assert type(opt.chained_optimizers[0].optimizer).__name__ == "TensorParallelMuon"
    ref = _Reference(model, muon_params, cfg, adjust_lr_fn)
    w0 = max(p.detach().abs().max().item() for p in muon_params)
    o = cfg.optimizer
    scale = max(
        math.sqrt(max(1, b.shape[0] / b.shape[1])) if o.muon_scale_mode == "shape_scaling"
        else math.sqrt(max(b.shape)) * o.muon_extra_scale_factor
        for p in muon_params for b in ref.parts(p, bool(getattr(p, "is_qkv", False)))
    )  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    diffs = []
    for _ in range(steps):
        opt.zero_grad()
        for name, p in model.named_parameters():
            is_muon, qkv, copies = ref.params[name]
            grads = [
                make_gradient(c.shape, gen) if is_muon else torch.randn(c.shape, generator=gen)
                for c in copies
            ]
            for c, g in zip(copies, grads, strict=True):
                c.grad = g.clone()
            p.grad = grads[0].clone() if not qkv else _join(ref, grads, p.shape)
        opt.step()
        sched.step(increment=cfg.train.global_batch_size)
        ref.muon.step()
        ref.adam.step()
        worst = {True: 0.0, False: 0.0}
        for name, p in model.named_parameters():
            is_muon = ref.params[name][0]
            worst[is_muon] = max(worst[is_muon], (p.detach() - ref.joined(name, p.shape)).abs().max().item())
        diffs.append((worst[True], worst[False]))
    return diffs, o.lr * scale, w0


def _join(ref, grads, shape):
    import torch

    groups = shape[0] // sum(ref.split)
    return torch.cat([g.view(groups, -1, shape[1]) for g in grads], dim=1).view(shape)


@needs_muon
@pytest.mark.usefixtures("single_process_groups")
def test_same_bf16_input_gives_torch_optim_muon_exactly():
    # momentum 0: the Newton-Schulz input is the gradient itself, made exact in bf16 (see
    # _exact_bf16_gradient), so both run the same bf16 iteration on the same bits. What remains is fp32
    # arithmetic in the update: W (1 - lr wd) (torch) vs W + W (-wd lr) (Megatron-Core), and lr * scale
    # applied before (torch) or after (Megatron-Core) the product: a few fp32 roundings of |W| per step.
    options = ["optimizer.muon_momentum=0", "optimizer.muon_nesterov=false", "optimizer.muon_coefficient_type=simple",
               "optimizer.muon_scale_mode=shape_scaling", "optimizer.muon_fp32_matmul_prec=medium"]  # fmt: skip
    diffs, _, w0 = _run(options, "original", _exact_bf16_gradient)
    for step, (muon, adam) in enumerate(diffs, 1):
        assert muon <= 4 * step * EPS_FP32 * (w0 + 1), (step, muon)
        assert adam == 0.0, (step, adam)  # Megatron-Core's Adam on CPU is torch.optim.AdamW itself
    print(f"exact-input max |dW| per step: {[d[0] for d in diffs]}")


@needs_muon
@pytest.mark.usefixtures("single_process_groups")
def test_momentum_nesterov_and_adamw_rms_scaling_match_torch_within_bf16_rounding():
    # Momentum 0.95 with Nesterov, Moonlight's update scale (spectral * 0.2 = torch's match_rms_adamw).
    # Here the Newton-Schulz inputs are rounded to bf16 at different points (torch before normalizing,
    # Megatron-Core after), so the bf16 iterations start one rounding apart. Bound on the orthogonalized
    # update O (entries |O| <= 1): each of the 5 steps rounds three results (X X^T, the polynomial, X)
    # to bf16 (relative error u = 2^-8), and a later step carries an error on with a factor at most
    # L = max |p'(s)| = 1.2 of p(s) = a s + b s^3 + c s^5 over the band [0.68, 1.2] where the singular
    # values sit once converged (well-conditioned gradients, _well_conditioned_gradient); each
    # implementation errs on its own: |dO| <= 2 * 3u * sum_k<5 L^k. The weights move by lr * scale * O
    # per step and their differences add up (the gradients do not depend on the weights here).
    options = ["optimizer.muon_momentum=0.95", "optimizer.muon_nesterov=true", "optimizer.muon_coefficient_type=simple",
               "optimizer.muon_scale_mode=spectral", "optimizer.muon_extra_scale_factor=0.2",
               "optimizer.muon_fp32_matmul_prec=medium"]  # fmt: skip
    diffs, step_size, _ = _run(options, "match_rms_adamw", _well_conditioned_gradient)
    d_o = 2 * 3 * U_BF16 * sum(1.2**k for k in range(5))
    for step, (muon, adam) in enumerate(diffs, 1):
        assert muon <= step * step_size * d_o, (step, muon, step * step_size * d_o)
        assert adam == 0.0, (step, adam)
    print(f"bf16 max |dW| per step: {[d[0] for d in diffs]}, bound per step {step_size * d_o:.3g}")
