"""torch.distributed.pipelining schedules (gpipe, looped_bfs, dfs, zero_bubble) over Megatron-Core's model
chunks: the runner train.py calls instead of Megatron-Core's forward_backward function when the plan's
schedule is a torch one (docs/parallelism.md, "Pipeline schedules").

Stages. bridge builds this rank's chunks with Megatron-Core's own layer split (one chunk per virtual stage;
chunk v of pipeline rank r is virtual stage v*pp + r, the loop order torch's multi-stage schedules use),
and each chunk becomes one `PipelineStage` over the pipeline group. The stage module keeps Megatron-Core's
contract: a non-first stage gets its input through `set_input_tensor` (the hidden states [s, b, h], s
split by cp and, with sequence parallelism, by tp), every stage runs the plan's forward step
(`forward_step(data_iterator, model)`) on its own copy of the micro batch, and the last stage returns what
the forward step's model call returns (per-token losses, labels given). TP/SP/CP run inside a stage as
usual. The schedule only moves micro batch numbers and hidden states: the first stage's root input, the
keyword input of every stage and the loss target are the micro batch index, so the data, the CP split and
the packed-sequence parameters are the forward step's, as with Megatron-Core's schedules. Shapes are given
to the stages (static metadata: no extra forward to infer them).

Normalisation. The loss of micro batch i is its loss sum / its tokens (Megatron-Core's three-value loss),
times the optimizer's loss scale. distributed.scale_grads_in_schedule=true lets the schedule divide the
gradients by the number of micro batches m at the end; false (AutoModel's default) divides each loss by m
before its backward instead, as Megatron-Core's schedules do. Either way the gradient is the mean over the
step's micro batches of their per-token mean losses, the 1F1B path's gradient. With
calculate_per_token_loss the losses are summed and finalize divides by the step's token count.

Gradients. Megatron-Core DDP's hooks sit on the gradient accumulators, which torch's zero-bubble weight
pass bypasses (it computes weight gradients with autograd.grad and assigns param.grad): every stage moves
what is left in param.grad into main_grad before the schedule's scaling and before the finish. The whole
step runs under the chunks' no_sync(); afterwards the config's finalize_model_grads_func (Megatron-Core's
finalize_model_grads: the data-parallel all-reduce, tied embedding gradients between the first and last
stage, sequence-parallel norm gradients over TP) runs once, as at the end of Megatron-Core's schedules.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def _stage_class():
    from torch.distributed.pipelining import PipelineStage

    class ChunkStage(PipelineStage):
        """A PipelineStage whose gradients live where Megatron-Core DDP keeps them (param.main_grad)."""

        def grads_to_main_grad(self) -> None:
            # What Megatron-Core DDP's backward hook does, for gradients that bypassed it.
            for p in self.submod.parameters():
                if p.grad is None or getattr(p, "main_grad", None) is None:
                    continue
                if not getattr(p, "grad_added_to_main_grad", False) or getattr(p, "zero_out_wgrad", False):
                    p.main_grad.add_(p.grad)
                p.grad = None

        def scale_grads(self, grad_scale_factor: int) -> None:
            self.grads_to_main_grad()
            if grad_scale_factor != 1:
                for p in self.submod.parameters():
                    grad = getattr(p, "main_grad", None)
                    if grad is None:
                        grad = p.grad
                    if grad is not None:
                        grad.div_(grad_scale_factor)

        def perform_reduce_grad(self, grad_scale_factor: int) -> None:
            self.grads_to_main_grad()
            super().perform_reduce_grad(grad_scale_factor)

    return ChunkStage


class _StageModule(torch.nn.Module):
    """One model chunk as a pipeline stage: (micro batch index or hidden states, mb=index) -> output."""

    def __init__(self, runner: TorchPipelineRunner, chunk, chunk_index: int, is_first: bool, is_last: bool):
        super().__init__()
        self.chunk = chunk
        self.runner = runner
        self.chunk_index = chunk_index
        self.is_first, self.is_last = is_first, is_last

    def forward(self, x: torch.Tensor, mb: torch.Tensor):
        from megatron.core.utils import get_attr_wrapped_model

        index = int(mb.reshape(-1)[0])
        get_attr_wrapped_model(self.chunk, "set_input_tensor")(None if self.is_first else x)
        batch = self.runner.batches[self.chunk_index][index]
        output, loss_partial = self.runner.forward_step_func(iter([batch]), self.chunk)
        if self.is_last:
            self.runner.loss_partials[index] = loss_partial
        return output


class TorchPipelineRunner:
    """The plan's torch schedule over this rank's chunks; `forward_backward` returns what Megatron-Core's
    forward_backward function returns: on the last stage one {"lm loss": [sum, count]} per micro batch."""

    def __init__(self, plan, model: list, forward_step_func):
        from megatron.core import parallel_state as ps
        from megatron.core.utils import get_model_config
        from torch.distributed.pipelining import schedules

        pipe = plan.pipeline
        self.plan, self.model, self.forward_step_func = plan, model, forward_step_func
        self.num_microbatches = plan.num_microbatches
        self.scale_grads_in_schedule = pipe.scale_grads_in_schedule
        self.config = get_model_config(model[0])
        pp, pp_rank = ps.get_pipeline_model_parallel_world_size(), ps.get_pipeline_model_parallel_rank()
        if len(model) != pipe.stages_per_rank or pp != plan.layout.pp:
            raise RuntimeError(
                f"the plan's pipeline has {pipe.stages_per_rank} stage(s) per rank on pp={plan.layout.pp}, "
                f"this rank holds {len(model)} chunk(s) on pp={pp}"
            )
        num_stages = pp * len(model)
        device = (
            torch.device(torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        )
        group = ps.get_pipeline_model_parallel_group()
        hidden = self._hidden_example(plan)
        losses = torch.empty(plan.config.train.micro_batch_size, plan.data.seq_length // plan.layout.cp)
        stage_class = _stage_class()
        self.stages = []
        for v, chunk in enumerate(model):
            stage_id = v * pp + pp_rank  # Megatron-Core's virtual stage of chunk v (torch's loop order)
            first, last = stage_id == 0, stage_id == num_stages - 1
            module = _StageModule(self, chunk, v, first, last)
            self.stages.append(
                stage_class(
                    module,
                    stage_id,
                    num_stages,
                    device,
                    input_args=torch.zeros(1, dtype=torch.long) if first else hidden,
                    output_args=losses if last else hidden,
                    group=group,
                )
            )
        cls = getattr(schedules, pipe.torch_class)
        self.schedule = cls(
            self.stages if issubclass(cls, schedules.PipelineScheduleMulti) else self.stages[0],
            n_microbatches=self.num_microbatches,
            loss_fn=self._loss,
            scale_grads=self.scale_grads_in_schedule,
        )
        self.device = device
        self.batches: list[list[dict]] = [[] for _ in model]
        self.loss_partials: dict[int, Any] = {}
        self.reports: dict[int, Any] = {}
        self.num_tokens = torch.zeros((), dtype=torch.int, device=device)

    @staticmethod
    def _hidden_example(plan) -> torch.Tensor:
        """The hidden states one stage sends the next for one micro batch: [s, b, h] in the pipeline dtype."""
        lay, provider = plan.layout, plan.provider
        seq = plan.data.seq_length // lay.cp
        if lay.sequence_parallel:
            seq //= lay.tp
        dtype = plan.precision.torch_dtype if plan.cuda else torch.float32
        shape = (seq, plan.config.train.micro_batch_size, provider.hidden_size)
        return torch.empty(shape, dtype=dtype, device="meta").requires_grad_(True)

    # -- the schedule's loss function: the forward step's loss partial of that micro batch --------

    def _loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        index = int(target.reshape(-1)[0])
        loss, num_tokens, report = self.loss_partials.pop(index)(output)
        self.reports[index] = report
        self.num_tokens += num_tokens.detach().to(self.device, torch.int)
        if not self.config.calculate_per_token_loss:
            loss = loss / torch.clamp(num_tokens, min=1)
            if not self.scale_grads_in_schedule:
                loss = loss / self.num_microbatches
        if self.config.grad_scale_func is not None and torch.is_grad_enabled():
            loss = self.config.grad_scale_func(loss)
        return loss

    def _set_moe_aux_loss_scale(self) -> None:
        """As Megatron-Core's forward_step_calc_loss: the MoE auxiliary loss's backward scale."""
        if getattr(self.config, "num_moe_experts", None) is None:
            return
        from megatron.core import parallel_state as ps
        from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

        one = torch.ones(1, device=self.device)
        scale = self.config.grad_scale_func(one) if self.config.grad_scale_func is not None else one
        if not self.config.calculate_per_token_loss:
            scale = scale * ps.get_context_parallel_world_size()
            if not self.scale_grads_in_schedule:
                scale = scale / self.num_microbatches
        MoEAuxLossAutoScaler.set_loss_scale(scale)

    def forward_backward(self, iterators: list, forward_only: bool) -> list[dict]:
        m = self.num_microbatches
        # Every stage reads its m micro batches, as with Megatron-Core's schedules (one iterator per chunk).
        self.batches = [[next(it) for _ in range(m)] for it in iterators]
        self.loss_partials.clear()
        self.reports.clear()
        self.num_tokens = torch.zeros((), dtype=torch.int, device=self.device)
        index = torch.arange(m)
        if forward_only:
            self.schedule.eval(index, target=index, return_outputs=False, mb=index)
        else:
            self._set_moe_aux_loss_scale()
            with contextlib.ExitStack() as stack:
                for chunk in self.model:
                    if hasattr(chunk, "no_sync"):
                        stack.enter_context(chunk.no_sync())
                self.schedule.step(index, target=index, losses=[], return_outputs=False, mb=index)
            for stage in self.stages:
                stage.grads_to_main_grad()
            if self.config.finalize_model_grads_func is not None:
                tokens = self.num_tokens if self.config.calculate_per_token_loss else None
                self.config.finalize_model_grads_func(self.model, tokens)
        self.batches = [[] for _ in self.model]
        return [self.reports[i] for i in sorted(self.reports)]


def build_runner(plan, model: list, forward_step_func) -> TorchPipelineRunner | None:
    """The torch schedule runner when the plan's pipeline runs on torch.distributed.pipelining, else None."""
    if plan.pipeline.engine != "torch":
        return None
    return TorchPipelineRunner(plan, model, forward_step_func)
