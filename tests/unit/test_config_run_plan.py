"""One ParallelLayout per run: validation builds it once and the RunPlan carries it to training."""

from __future__ import annotations

from bridge.config.container import ConfigContainer
from bridge.config.run_plan import build_plan
from bridge.models.gpt_provider import GPTModelProvider


def test_validation_builds_the_layout_once_and_the_plan_keeps_it(monkeypatch):
    from bridge.config import layout as config_layout

    built = []
    derive = config_layout.derive_layout

    def counted(*args, **kwargs):
        built.append(derive(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(config_layout, "derive_layout", counted)
    model = GPTModelProvider(
        num_layers=4,
        hidden_size=64,
        num_attention_heads=4,
        vocab_size=1024,
        seq_length=128,
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2,
    )
    cfg = ConfigContainer(model=model)
    cfg.train.global_batch_size = 8
    cfg.train.train_iters = 10
    cfg.scheduler.lr_warmup_iters = 2
    plan = build_plan(cfg, 8, cuda=False)
    assert len(built) == 1 and plan.layout is built[0]
    assert plan.layout.describe().startswith("TP=2 PP=2 CP=1") and plan.layout.dp == 2
    assert plan.memory is not None  # estimated from the layout's own model shape
