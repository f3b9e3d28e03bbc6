"""The multi-token-prediction losses of a step, logged beside the LM loss ("mtp_1 loss", ... as Megatron-LM
names them).

Megatron-Core's MTP block adds each depth's loss to its gradient (MTPLossAutoScaler, scaled by
mtp_loss_scaling_factor / mtp_num_layers) and keeps each micro batch's mean loss in
MTPLossLoggingHelper's tracker on the ranks that hold the MTP layers (the last pipeline stage); the
step's value is that sum over the data-parallel (x context-parallel) replicas' average, divided by the
micro batch count. The tracker's names changed between releases (0.16: values / *_loss_in_tracker;
0.19: loss_values / *_metrics_in_tracker): both are read.
"""

from __future__ import annotations

import torch


def mtp_step_losses(num_layers: int, num_microbatches: int, src: int) -> dict[str, float]:
    """{"mtp_1 loss": ..., ...} of the step just run, on every rank (broadcast from rank `src`, a last
    pipeline stage rank); the tracker is emptied for the next step."""
    from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper as helper

    tracker = helper.tracker
    key = "loss_values" if "loss_values" in tracker else "values"
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    out = torch.zeros(num_layers, dtype=torch.float64, device=device)
    if key in tracker:
        reduce = getattr(helper, "reduce_metrics_in_tracker", None) or helper.reduce_loss_in_tracker
        clean = getattr(helper, "clean_metrics_in_tracker", None) or helper.clean_loss_in_tracker
        reduce()  # collective over the data-parallel group of the ranks holding MTP layers
        out.copy_(tracker[key].detach().to(out.dtype)[:num_layers] / num_microbatches)
        clean()
    torch.distributed.broadcast(out, src=src)
    return {f"mtp_{k + 1} loss": float(v) for k, v in enumerate(out.tolist())}
