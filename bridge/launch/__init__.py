"""Launchers for existing schedulers: a validated run rendered into SLURM's sbatch script or Kubernetes
manifests (Kubeflow PyTorchJob, JobSet). Nothing here schedules anything: SLURM or Kubernetes does.

A layer of its own under bridge.cli (which validates the run and submits); it reads the RunPlan and
imports neither torch nor megatron.core, nor recipes.
"""
