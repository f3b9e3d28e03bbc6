"""One rank: report torch's bad-fork flag and, where CUDA devices exist, initialise CUDA and compute on it
(what "Cannot re-initialize CUDA in forked subprocess" stopped in ranks forked from a server that had
queried the CUDA runtime)."""

from __future__ import annotations

import torch
from train_common import emit

record = {"bad_fork": bool(torch.cuda._is_in_bad_fork()), "cuda_sum": None}
if torch.cuda.device_count() > 0 and not record["bad_fork"]:
    record["cuda_sum"] = float(torch.arange(4.0, device="cuda").sum().item())
emit("cuda", record)
