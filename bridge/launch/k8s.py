"""Kubernetes: the run as a Kubeflow PyTorchJob (kubeflow.org/v1) or a JobSet (jobset.x-k8s.io/v1alpha2).

One pod per node, each running one torchrun agent (`bridge run`) for `procs_per_node` ranks, meeting at a
c10d rendezvous on the first pod: the PyTorchJob's master service (MASTER_ADDR / MASTER_PORT, set by the
training operator), or the JobSet's first pod by its stable host name. The checkpoint directory and the
data folders are mounted from PersistentVolumeClaims at the same paths as in the config. Pods restart
on failure (restartPolicy OnFailure / the JobSet's failurePolicy) and resume from checkpoint.save;
BRIDGE_SCHEDULER_JOB carries the job's identity (made when the manifest is written), so a restarted pod
on another node takes over the checkpoint lock its failed predecessor left.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath

from bridge.config.scheduler_job import JOB_ENV
from bridge.errors import ConfigError
from bridge.launch.spec import LaunchSpec, check_k8s_name

KINDS = ("pytorchjob", "jobset")


@dataclass(frozen=True)
class K8sOptions:
    image: str
    namespace: str = "default"
    # (claim name, mount path): a PersistentVolumeClaim mounted into every pod
    volumes: tuple[tuple[str, str], ...] = ()
    backoff_limit: int = 3  # pod restarts the job allows before it fails
    shm_gib: int = 16  # /dev/shm for the data loader workers and NCCL (a memory-backed emptyDir)


def _volumes(spec: LaunchSpec, opts: K8sOptions) -> tuple[list[dict], list[dict]]:
    """The pod's volumes and the container's mounts; every path the run writes or reads must be mounted."""
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{opts.shm_gib}Gi"}}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for i, (claim, path) in enumerate(opts.volumes):
        if not PurePosixPath(path).is_absolute():
            raise ConfigError(
                f"--volume {claim}:{path}: the mount path must be absolute. Fix: --volume {claim}:/{path}"
            )
        volumes.append({"name": f"vol{i}", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": f"vol{i}", "mountPath": path})
    needed = [("checkpoint.save", spec.checkpoint_dir)] if spec.checkpoint_dir else []
    needed += [("dataset.data_paths", p) for p in spec.data_paths]
    for what, path in needed:
        if not any(PurePosixPath(path).is_relative_to(m["mountPath"]) for m in mounts[1:]):
            raise ConfigError(
                f"{what} = {path!r} is not under a mounted volume: a pod's own disk is lost when it restarts. "
                f"Fix: --volume CLAIM:{PurePosixPath(path).parent} (a PersistentVolumeClaim holding it)"
            )
    return volumes, mounts


def _container(spec: LaunchSpec, opts: K8sOptions, job_id: str, endpoint: str, mounts: list[dict]) -> dict:
    env = [{"name": key, "value": value} for key, value in spec.env]
    env.append({"name": JOB_ENV, "value": job_id})
    resources = {"limits": {"nvidia.com/gpu": spec.procs_per_node}} if spec.gpus else {}
    command = [
        spec.python,
        "-m",
        "bridge.cli",
        "run",
        *spec.torchrun_args(endpoint, job_id),
        *spec.script_words(),
    ]
    return {
        "name": "pytorch",  # the training operator finds the training container by this name
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "workingDir": spec.workdir,
        # no shell: Kubernetes itself expands $(MASTER_ADDR) in the arguments
        "command": command,
        "env": env,
        "resources": resources,
        "volumeMounts": mounts,
    }


def job_identity(spec: LaunchSpec, opts: K8sOptions) -> str:
    return f"k8s:{opts.namespace}/{spec.job_name}/{uuid.uuid4().hex}"


def pytorchjob(spec: LaunchSpec, opts: K8sOptions, job_id: str | None = None) -> dict:
    spec.check()
    check_k8s_name(spec.job_name)
    job_id = job_id or job_identity(spec, opts)
    volumes, mounts = _volumes(spec, opts)
    # the operator sets MASTER_ADDR / MASTER_PORT in every pod (the master's service); Kubernetes expands $(..)
    container = _container(spec, opts, job_id, "$(MASTER_ADDR):$(MASTER_PORT)", mounts)

    def replicas(n: int) -> dict:
        return {
            "replicas": n,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": {"bridge/job": job_id}},
                "spec": {"containers": [container], "volumes": volumes},
            },
        }

    specs = {"Master": replicas(1)}
    if spec.nodes > 1:
        specs["Worker"] = replicas(spec.nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": spec.job_name, "namespace": opts.namespace},
        "spec": {
            "nprocPerNode": str(spec.procs_per_node),
            "runPolicy": {"backoffLimit": opts.backoff_limit, "cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": specs,
        },
    }


def jobset(spec: LaunchSpec, opts: K8sOptions, job_id: str | None = None) -> dict:
    spec.check()
    check_k8s_name(spec.job_name)
    job_id = job_id or job_identity(spec, opts)
    volumes, mounts = _volumes(spec, opts)
    # JobSet's headless service gives pod <jobset>-<replicatedJob>-<job index>-<pod index> the host name
    # <that>.<jobset>: the first pod hosts the rendezvous
    head = f"{spec.job_name}-node-0-0.{spec.job_name}"
    container = _container(spec, opts, job_id, f"{head}:{spec.rdzv_port}", mounts)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": spec.job_name,
            "namespace": opts.namespace,
            "annotations": {"bridge/job": job_id},
        },
        "spec": {
            "network": {"enableDNSHostnames": True},
            # a failed pod fails its Job, and the JobSet restarts all of them (every agent must rejoin)
            "failurePolicy": {"maxRestarts": opts.backoff_limit},
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": spec.nodes,
                            "completions": spec.nodes,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [container],
                                    "volumes": volumes,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def render(kind: str, spec: LaunchSpec, opts: K8sOptions, job_id: str | None = None) -> dict:
    if kind not in KINDS:
        raise ConfigError(f"--kind {kind!r}: one of {', '.join(KINDS)}. Fix: --kind pytorchjob")
    return (pytorchjob if kind == "pytorchjob" else jobset)(spec, opts, job_id)
