"""distributed.strategy: what runs where, and the Megatron-Core DDP config built from the section."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from bridge.config.run_plan import build_plan
from bridge.config.sections import DistributedConfig
from bridge.errors import ConfigError
from bridge.training.strategies import ddp_config_for
from tests.functional.launch import REPO_ROOT


def _plan(strategy: str, cuda: bool):
    from bridge.config.container import ConfigContainer
    from bridge.models.gpt_provider import GPTModelProvider

    model = GPTModelProvider(
        num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
    )
    cfg = ConfigContainer(model=model)
    cfg.train.train_iters, cfg.train.global_batch_size, cfg.scheduler.lr_warmup_iters = 4, 2, 0
    cfg.validation.eval_interval = 0
    cfg.distributed.strategy = strategy
    cfg.optimizer.use_distributed_optimizer = strategy in ("megatron", "megatron_fsdp")
    for knob in ("overlap_grad_reduce", "overlap_param_gather"):
        setattr(cfg.distributed, knob, strategy == "megatron")
    return build_plan(cfg, 2, cuda=cuda)


@pytest.mark.parametrize("strategy", ["megatron_fsdp"])
def test_cuda_only_strategies_are_refused_on_cpu_by_the_plan(strategy):
    with pytest.raises(
        ConfigError, match=rf"distributed.strategy = '{strategy}': cannot run on this machine"
    ):
        _plan(strategy, cuda=False)
    assert _plan(strategy, cuda=True).layout.strategy == strategy  # allowed with CUDA


def test_cpu_strategies_and_unknown_names():
    assert _plan("megatron", cuda=False).layout.strategy == "megatron"
    assert _plan("ddp", cuda=False).layout.strategy == "ddp"
    assert _plan("fsdp2", cuda=False).layout.strategy == "fsdp2"  # PyTorch FSDP2 runs on gloo
    with pytest.raises(ConfigError, match="distributed.strategy\\) = 'zero3': must be one of"):
        _plan("zero3", cuda=True)


def test_ddp_config_follows_the_section():
    cfg = ddp_config_for(
        DistributedConfig(overlap_grad_reduce=False, grad_reduce_in_fp32=False), "megatron", True
    )
    assert (cfg.overlap_grad_reduce, cfg.grad_reduce_in_fp32, cfg.use_distributed_optimizer) == (
        False,
        False,
        True,
    )
    assert cfg.overlap_param_gather is True
    assert cfg.check_for_nan_in_grad is False  # the loop checks finiteness on all ranks together
    fsdp = ddp_config_for(DistributedConfig(), "megatron_fsdp", True)
    assert fsdp.use_megatron_fsdp and fsdp.data_parallel_sharding_strategy == "optim_grads_params"


def test_megatron_fsdp_averages_in_the_collective_only_with_moe():
    # Megatron-Core's Megatron-FSDP has an expert data-parallel group only for MoE models, and averaging in
    # the collective asks for it (issue 44: None on megatron-core 0.19.2): a dense model divides first
    on = DistributedConfig(average_in_collective=True)
    assert ddp_config_for(on, "megatron_fsdp", True).average_in_collective is False
    assert ddp_config_for(on, "megatron_fsdp", True, num_moe_experts=4).average_in_collective is True
    assert ddp_config_for(on, "megatron", True).average_in_collective is True  # DDP: as set
    off = DistributedConfig(average_in_collective=False)
    assert ddp_config_for(off, "megatron_fsdp", True, num_moe_experts=4).average_in_collective is False
    # and the plan says so (not a silent change of the setting)
    from bridge.config.checks.distributed import MEGATRON_FSDP_DENSE_AVERAGE

    assert MEGATRON_FSDP_DENSE_AVERAGE in _plan("megatron_fsdp", cuda=True).warnings
    assert MEGATRON_FSDP_DENSE_AVERAGE not in _plan("megatron", cuda=True).warnings


TORCH_DDP = textwrap.dedent(
    r"""
    import inspect, warnings
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1)
    parallel_state.get_data_parallel_group = lambda *a, **k: dist.group.WORLD  # no model-parallel init needed
    from bridge.training.strategies import _torch_ddp

    DDP = torch.nn.parallel.DistributedDataParallel
    new_torch = "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters

    def ddp_warnings(make):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wrapped = make()
        return wrapped, [str(w.message)[:40] for w in caught if "buffers" in str(w.message)]

    _, old_way = ddp_warnings(lambda: DDP(torch.nn.BatchNorm1d(3), broadcast_buffers=False))
    ddp, ours = ddp_warnings(lambda: _torch_ddp(torch.nn.BatchNorm1d(3)))
    ddp(torch.randn(4, 3)).sum().backward()
    print("RESULT", (new_torch, old_way, ours, ddp.will_sync_module_buffers()))
    """
)


def test_torch_ddp_passes_no_deprecated_argument_and_syncs_no_buffers_per_forward():
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_DDP], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    new_torch, old_way, ours, syncs = eval(line.removeprefix("RESULT "))  # noqa: S307 (our own repr)
    if new_torch:  # the real torch source deprecates broadcast_buffers: the check can see the warning
        assert old_way and old_way[0].startswith("`broadcast_buffers` is deprecated"), old_way
    assert ours == [], ours
    assert syncs is False
