"""distributed.strategy: what runs where, and the Megatron-Core DDP config built from the section."""

from __future__ import annotations

import pytest

from bridge.config.sections import DistributedConfig
from bridge.errors import ConfigError
from bridge.training.strategies import check_strategy_available, ddp_config_for


@pytest.mark.parametrize("strategy", ["fsdp2", "megatron_fsdp"])
def test_cuda_only_strategies_raise_on_cpu(strategy):
    with pytest.raises(ConfigError, match=rf"distributed.strategy={strategy} cannot run on this machine"):
        check_strategy_available(strategy, cuda_available=False)
    check_strategy_available(strategy, cuda_available=True)  # allowed with CUDA


def test_cpu_strategies_and_unknown_names():
    check_strategy_available("megatron", cuda_available=False)
    check_strategy_available("ddp", cuda_available=False)
    with pytest.raises(ConfigError, match="distributed.strategy='zero3' is not known"):
        check_strategy_available("zero3", cuda_available=True)


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
