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
#
# Both run Newton-Schulz in bf16 but round its input at different points: torch.optim.Muon rounds U to bf16
# and divides by its norm in bf16, Megatron-Core divides in fp32 and then rounds. On a gradient with
# singular values far below the largest (a real model's), that one rounding apart is amplified by up to
# a^5 = 3.4445^5 ~ 480 along those directions, so the two differ by bf16 noise, not by arithmetic.
# The tests make the rounding point irrelevant: each Newton-Schulz input U is exact in bf16 and its
# Frobenius norm N is exact in bf16 and fp32, so both divisions give round(U / N) and both iterations start
# from the same bits and run the same bf16 matmuls (addmm with the same arguments). Gradients: entries
# 0 or +-1 on a random support; with momentum, U is a combination of two gradients with disjoint supports
# and dyadic weights (momentum 0.5), the support sizes chosen so that N is exact. What remains is fp32
# arithmetic in the update: W (1 - lr wd) (torch) against W + W (-wd lr) (Megatron-Core), and lr * scale
# applied before (torch) or after (Megatron-Core) the product: a few fp32 roundings of |W| + |update|.

EPS_FP32 = 2.0**-23


def _signs(shape, count: int, gen, exclude=None):
    """A gradient of `count` entries +-1 at random places (not in `exclude`'s support), zeros elsewhere."""
    import torch

    free = torch.ones(shape).view(-1) if exclude is None else (exclude.view(-1) == 0).float()
    places = torch.multinomial(free, count, replacement=False, generator=gen)
    g = torch.zeros(shape).view(-1)
    g[places] = torch.randint(0, 2, (count,), generator=gen).float() * 2 - 1
    return g.view(shape)


def _independent(key, shape, gen, step: int, memory: dict):
    """Momentum 0 (U = G): 1024 = 4^5 entries +-1, so N = 32 every step."""
    return _signs(shape, 1024, gen)


def _two_directions(key, shape, gen, step: int, memory: dict):
    """Momentum 0.5 with Nesterov: G_1 = A (400 entries), G_2 = B (64 entries, disjoint from A's). Then
    B_1 = A / 2, U_1 = G_1 + 0.5 (B_1 - G_1) = 3/4 A, N = 3/4 * 20 = 15; B_2 = A / 4 + B / 2,
    U_2 = G_2 + 0.5 (B_2 - G_2) = A / 8 + 3/4 B, N^2 = 400 / 64 + 9/16 * 64 = 42.25, N = 6.5."""
    if step == 0:
        memory[key] = _signs(shape, 400, gen)
        return memory[key]
    return _signs(shape, 64, gen, exclude=memory[key])


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
        """The fused QKV weight's Q, K and V blocks (each over all query groups), as Megatron-Core splits it."""
        import torch

        if not qkv:
            return [t]
        groups = t.shape[0] // sum(self.split)
        blocks = torch.split(t.view(groups, sum(self.split), -1), self.split, dim=1)
        return [b.reshape(-1, t.shape[1]) for b in blocks]

    def join(self, blocks: list, qkv: bool, shape):
        import torch

        if not qkv:
            return blocks[0]
        groups = shape[0] // sum(self.split)
        return torch.cat([b.view(groups, -1, shape[1]) for b in blocks], dim=1).view(shape)


def _compare(overrides, adjust_lr_fn, gradient, steps: int):
    """Megatron-Core's Muon + Adam as bridge builds them and the torch reference, fed the same gradients:
    per step, max |W_megatron - W_torch| over the Muon parameters, the same over the Adam ones, the
    fp32 tolerance (see above), and the largest momentum-buffer difference."""
    import torch

    from bridge.config.run_plan import build_plan
    from bridge.training.optim import build_optimizer, build_scheduler

    cfg = _tiny(
        *MUON, "optimizer.lr=0.02", "optimizer.weight_decay=0.1", "optimizer.clip_grad=0",
        "scheduler.lr_decay_style=constant", "scheduler.lr_warmup_iters=0",
        "scheduler.start_weight_decay=null", "scheduler.end_weight_decay=null",
        "optimizer.muon_coefficient_type=simple", "optimizer.muon_num_ns_steps=5",
        "optimizer.muon_fp32_matmul_prec=medium", "optimizer.muon_split_qkv=true", *overrides,
    )  # fmt: skip
    plan = build_plan(cfg, 1, cuda=False)
    torch.manual_seed(0)
    model = plan.provider.provide_distributed_model(wrap_with_ddp=False)[0]
    opt = build_optimizer(
        cfg.optimizer, [model], plan.precision, cfg.mixed_precision, use_distributed_optimizer=False
    )
    sched = build_scheduler(opt, cfg.optimizer, cfg.scheduler, plan.schedule)  # sets each group's lr and wd
    muon_opt = opt.chained_optimizers[0].optimizer
    assert type(muon_opt).__name__ == "TensorParallelMuon"
    muon_params = [p for g in muon_opt.param_groups for p in g["params"]]
    ref = _Reference(model, muon_params, cfg, adjust_lr_fn)
    gen, memory, out = torch.Generator().manual_seed(1), {}, []
    for step in range(steps):
        opt.zero_grad()
        for name, p in model.named_parameters():
            is_muon, qkv, copies = ref.params[name]
            grads = [
                gradient((name, i), c.shape, gen, step, memory)
                if is_muon
                else torch.randn(c.shape, generator=gen)
                for i, c in enumerate(copies)
            ]
            for c, g in zip(copies, grads, strict=True):
                c.grad = g.clone()
            p.grad = ref.join(grads, qkv, p.shape).clone()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        sched.step(increment=cfg.train.global_batch_size)
        ref.muon.step()
        ref.adam.step()
        worst, tol, buf = {True: 0.0, False: 0.0}, 0.0, 0.0
        for name, p in model.named_parameters():
            is_muon, qkv, copies = ref.params[name]
            mine = p.detach()
            theirs = ref.join([c.detach() for c in copies], qkv, p.shape)
            worst[is_muon] = max(worst[is_muon], (mine - theirs).abs().max().item())
            if is_muon:
                moved = (mine - before[name]).abs().max().item()
                tol = max(tol, 4 * EPS_FP32 * (before[name].abs().max().item() + moved))
                state = ref.join([ref.muon.state[c]["momentum_buffer"] for c in copies], qkv, p.shape)
                buf = max(buf, (muon_opt.state[p]["momentum_buffer"] - state).abs().max().item())
        out.append((worst[True], worst[False], tol, buf))
    return out


@needs_muon
@pytest.mark.usefixtures("single_process_groups")
def test_muon_matches_torch_optim_muon():
    # 1. momentum 0, torch's default lr adjustment ("original" = shape_scaling), 3 steps
    plain = [
        "optimizer.muon_momentum=0",
        "optimizer.muon_nesterov=false",
        "optimizer.muon_scale_mode=shape_scaling",
    ]
    # 2. momentum (0.5: see _two_directions) with Nesterov and Moonlight's scale ("match_rms_adamw" =
    #    spectral * 0.2), 2 steps
    nesterov = ["optimizer.muon_momentum=0.5", "optimizer.muon_nesterov=true", "optimizer.muon_scale_mode=spectral",
                "optimizer.muon_extra_scale_factor=0.2"]  # fmt: skip
    report = {}
    for name, options, adjust, gradient, steps in [
        ("momentum 0", plain, "original", _independent, 3),
        ("nesterov 0.5", nesterov, "match_rms_adamw", _two_directions, 2),
    ]:
        per_step = _compare(options, adjust, gradient, steps)
        # accumulated over the steps: each step's rounding carries into the next weights
        for k, (muon, adam, tol, buf) in enumerate(per_step, 1):
            assert muon <= k * tol, (name, k, muon, k * tol)
            assert adam == 0.0, (name, k, adam)  # Megatron-Core's Adam on CPU is torch.optim.AdamW itself
            assert buf == 0.0, (name, k, buf)  # the same fp32 lerps on the same gradients
        report[name] = [f"{m:.2e} (tol {k * t:.2e})" for k, (m, _, t, _) in enumerate(per_step, 1)]
    print(f"max |W_megatron - W_torch| per step: {report}")
