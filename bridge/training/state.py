"""What a run carries from iteration to iteration (and into checkpoints)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bridge.errors import ConfigError


@dataclass
class TrainState:
    iteration: int = 0
    consumed_train_samples: int = 0
    consumed_valid_samples: int = 0
    skipped_iterations: int = 0
    layout: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainState:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class TrainResult:
    """Returned by pretrain() on every rank: per-iteration lm loss and grad norm (broadcast to all)."""

    iteration: int
    losses: dict[int, float] = field(default_factory=dict)
    grad_norms: dict[int, float | None] = field(default_factory=dict)
    learning_rates: dict[int, float] = field(default_factory=dict)
    validation_losses: dict[int, float] = field(default_factory=dict)
    # blended validation data: each source's validation loss by iteration, {path: loss} (every rank)
    validation_source_losses: dict[int, dict[str, float]] = field(default_factory=dict)
    # lm-eval scores by iteration, {"task/metric": value} (validation.lm_eval_tasks; every rank)
    benchmark_scores: dict[int, dict[str, float]] = field(default_factory=dict)
    skipped_iterations: int = 0
    last_checkpoint: str | None = None
    tokens_per_second: float | None = None
    # this rank's wall time of each iteration's train step (seconds; host-synchronised by the loss
    # read-back), for medians and warm-up cuts (benchmarks/gpu_throughput.py)
    iteration_times: dict[int, float] = field(default_factory=dict)
    # seconds each checkpoint save held the loop, by iteration (with checkpoint.async_save: until the
    # writer was forked; the write itself goes on beside the next steps)
    save_stalls: dict[int, float] = field(default_factory=dict)
    # per iteration, the metrics logged beside the loss (DPO: rewards/chosen, rewards/rejected,
    # rewards/margins, rewards/accuracies), on the last pipeline stage's ranks
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    exit_reason: str | None = None  # "received SIGTERM", "train.exit_duration_in_mins=... reached"
    # straggler.log_straggler: at each report's iteration, the (rank, "step" | "data") named (every rank)
    stragglers: dict[int, list[tuple[int, str]]] = field(default_factory=dict)


class NonFiniteLossError(ConfigError):
    """The loss, gradient norm or weights became NaN/inf: the run stops without saving, on every rank
    with the same one-line message (a ConfigError, so run_recipe.py prints it once as `error: ...`)."""
