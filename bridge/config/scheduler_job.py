"""Which scheduler job a run is an attempt of, read from the variables the scheduler (or bridge launch) sets.

A requeued or restarted attempt of one job keeps its identity: SLURM keeps SLURM_JOB_ID across requeues;
`bridge launch` sets BRIDGE_SCHEDULER_JOB, which wins, to one value for a whole `--dependency` chain (its
jobs run one after another, never together) and to the Kubernetes job's uid in its manifests. Two
different jobs never share an identity, so the checkpoint lock still refuses the second of two jobs.
Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping

JOB_ENV = "BRIDGE_SCHEDULER_JOB"


def scheduler_job(environ: Mapping[str, str]) -> str | None:
    """'<scheduler>:<id>' for this process's job, or None outside a scheduler."""
    explicit = environ.get(JOB_ENV, "").strip()
    if explicit:
        return explicit
    slurm = environ.get("SLURM_JOB_ID", "").strip()
    if slurm:
        # job ids restart from 1 on a new controller state: the cluster name tells two clusters apart
        return f"slurm:{environ.get('SLURM_CLUSTER_NAME', '')}/{slurm}"
    return None
