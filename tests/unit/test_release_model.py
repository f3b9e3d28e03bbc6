"""A finished pretrain() leaves nothing of its model behind in the process: Megatron-Core's DDP hooks sit
on autograd nodes that Python's collector cannot traverse, so without release_model every run's model,
optimizer and process groups stayed alive (tests/functional launches run many layouts in one process)."""

from __future__ import annotations

import gc

from bridge.config.run_plan import build_plan


def test_pretrain_releases_its_model_and_optimizer():
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.models.gpt import GPTModel

    from bridge.parallel import runtime
    from bridge.parallel.teardown import release_model_parallel_groups
    from bridge.training.pretrain import pretrain  # the function (the package attribute can be the submodule)
    from tests.functional.workers.train_common import tiny_config

    if runtime.is_initialized():
        runtime.destroy_distributed()
    try:
        result = pretrain(build_plan(tiny_config("train.train_iters=2", "dataset.kind=mock"), 1, cuda=False))
        assert result.losses  # it trained
        del result
        release_model_parallel_groups()  # the next layout's turn, as a test launch does between runs
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, GPTModel | DistributedDataParallel)]
        assert not alive, [type(o).__name__ for o in alive]
    finally:
        runtime.destroy_distributed()
