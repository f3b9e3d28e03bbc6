"""What a launcher renders: one run on `nodes` x `procs_per_node` ranks, taken from the validated plan.

Every node runs one torchrun agent (through `bridge run`, torchrun's own launcher) that starts
`procs_per_node` ranks; the agents meet at a c10d rendezvous on the first node. With
`max_restarts` > 0 an agent restarts its workers when a rank dies, and the workers resume from the last
complete checkpoint of checkpoint.save (bridge.config.checks.checkpoint.resume_plan).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from bridge.errors import ConfigError

RDZV_PORT = 29500  # torchrun's default master port
# Kubernetes object names: RFC 1123 labels (PyTorchJob and JobSet names become pod host names)
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class LaunchSpec:
    nodes: int
    procs_per_node: int  # ranks per node: GPUs per node on GPU, processes on CPU
    gpus: bool  # ask the scheduler for `procs_per_node` GPUs per node
    script: str  # the training entry point, relative to workdir (or inside the image)
    script_args: tuple[str, ...]  # its arguments: --recipe NAME and the dotted overrides
    job_name: str
    python: str  # the interpreter on the nodes
    workdir: str
    env: tuple[tuple[str, str], ...] = ()  # exported to every rank
    max_restarts: int = 0  # torchrun --max-restarts: worker restarts after a rank fails
    rdzv_port: int = RDZV_PORT
    checkpoint_dir: str | None = None  # checkpoint.save of the plan (mounted on Kubernetes)
    data_paths: tuple[str, ...] = ()  # the plan's dataset files (their folders are mounted on Kubernetes)

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    def check(self) -> None:
        for field, value in (("--nodes", self.nodes), ("--gpus-per-node", self.procs_per_node)):
            if value < 1:
                raise ConfigError(f"{field} {value}: must be at least 1. Fix: {field} 1 or more.")
        if self.max_restarts < 0:
            raise ConfigError(
                f"--max-restarts {self.max_restarts}: must be 0 or more. Fix: --max-restarts 0."
            )
        for key, _ in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ConfigError(
                    f"--env {key!r}: not an environment variable name. Fix: --env NAME=value, NAME of letters, "
                    "digits and _."
                )

    def torchrun_args(self, endpoint: str, rdzv_id: str) -> list[str]:
        """`bridge run` (torchrun's arguments) for one node's agent; endpoint and id may be shell words."""
        return [
            f"--nnodes={self.nodes}",
            f"--nproc-per-node={self.procs_per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={rdzv_id}",
            f"--max-restarts={self.max_restarts}",
        ]

    def script_words(self) -> list[str]:
        return [self.script, *self.script_args]


def check_k8s_name(name: str) -> None:
    if len(name) > 50 or not _K8S_NAME.match(name):
        raise ConfigError(
            f"--job-name {name!r}: a Kubernetes name is at most 50 characters of a-z, 0-9 and '-', starting "
            "and ending with a letter or digit (it becomes the pods' host names). Fix: e.g. --job-name "
            f"{re.sub(r'[^a-z0-9-]+', '-', name.lower()).strip('-')[:50] or 'bridge-run'}"
        )


def quote(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)
