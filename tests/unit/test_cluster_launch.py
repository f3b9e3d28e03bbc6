"""`bridge launch`: the sbatch script and the Kubernetes manifests rendered from a validated run.

The manifests are checked against the CRDs' published OpenAPI schemas (tests/data/k8s, with jsonschema),
made strict the way the API server's pruning is: a field the schema does not declare would be dropped
silently by Kubernetes, so here it is an error.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from bridge.cli import cluster_launch
from bridge.launch import k8s, slurm
from bridge.launch.spec import LaunchSpec

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "tests" / "data" / "k8s"
TINY = [
    "--recipe", "llama32_1b_pretrain_config",
    "model.num_layers=2", "model.hidden_size=64", "model.ffn_hidden_size=128", "model.num_attention_heads=4",
    "model.num_query_groups=2", "model.seq_length=64", "model.vocab_size=1024",
    "train.train_iters=4", "train.global_batch_size=4", "train.micro_batch_size=1",
    "scheduler.lr_warmup_iters=0", "validation.eval_iters=0", "validation.eval_interval=0",
]  # fmt: skip


def _strict(schema):
    """Kubernetes prunes fields a structural schema does not declare: make that an error here."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _validate(manifest: dict, schema_file: str) -> None:
    schema = _strict(json.loads((SCHEMAS / schema_file).read_text()))
    # the API server checks metadata itself (ObjectMeta is not in the CRD's schema)
    jsonschema.validate({k: v for k, v in manifest.items() if k != "metadata"}, schema)


def _spec(**changes) -> LaunchSpec:
    base = dict(
        nodes=2, procs_per_node=8, gpus=True, script="scripts/training/run_recipe.py",
        script_args=("--recipe", "x", "checkpoint.save=/shared/ckpt/run1"), job_name="bridge-run",
        python="python", workdir="/workspace", env=(("NCCL_DEBUG", "WARN"),), max_restarts=2,
        checkpoint_dir="/shared/ckpt/run1", data_paths=("/data/corpus_text_document",),
    )  # fmt: skip
    base.update(changes)
    return LaunchSpec(**base)


OPTS = k8s.K8sOptions(image="registry.example/bridge:1", volumes=(("ckpt", "/shared"), ("data", "/data")))


def test_pytorchjob_matches_the_published_schema():
    manifest = k8s.render("pytorchjob", _spec(), OPTS, job_id="k8s:default/bridge-run/abc")
    _validate(manifest, "pytorchjob.kubeflow.org.v1.schema.json")
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    pod = specs["Worker"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["name"] == "pytorch" and c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert (
        "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)" in c["command"] and "--max-restarts=2" in c["command"]
    )
    assert {"name": "BRIDGE_SCHEDULER_JOB", "value": "k8s:default/bridge-run/abc"} in c["env"]
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/dev/shm", "/shared", "/data"}
    assert specs["Master"]["restartPolicy"] == "OnFailure"
    # a typo the API server would silently prune is caught by the strict schema
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicyy"] = "Never"
    with pytest.raises(jsonschema.ValidationError):
        _validate(manifest, "pytorchjob.kubeflow.org.v1.schema.json")


def test_jobset_matches_the_published_schema():
    manifest = k8s.render("jobset", _spec(nodes=4), OPTS, job_id="k8s:default/bridge-run/abc")
    _validate(manifest, "jobset.x-k8s.io.v1alpha2.schema.json")
    job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 4 and job["completionMode"] == "Indexed"
    (c,) = job["template"]["spec"]["containers"]
    assert "--rdzv-endpoint=bridge-run-node-0-0.bridge-run:29500" in c["command"]
    assert "--nnodes=4" in c["command"] and "--nproc-per-node=8" in c["command"]


def test_k8s_refuses_an_unmounted_checkpoint_and_a_bad_name():
    with pytest.raises(
        Exception, match=r"checkpoint.save = '/shared/ckpt/run1' is not under a mounted volume"
    ):
        k8s.render("pytorchjob", _spec(), k8s.K8sOptions(image="i", volumes=(("data", "/data"),)))
    with pytest.raises(Exception, match=r"--job-name 'Bridge_Run'.*Fix: e.g. --job-name bridge-run"):
        k8s.render("jobset", _spec(job_name="Bridge_Run"), OPTS)


def test_slurm_script(tmp_path):
    text = slurm.render(_spec(workdir=str(tmp_path)), slurm.SlurmOptions(account="acc", partition="p",
                        time="04:00:00", requeue=True, container_image="nvcr.io/x:1"), chain_id="slurm-chain:ab")  # fmt: skip
    for line in ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --account=acc", "#SBATCH --partition=p", "#SBATCH --time=04:00:00", "#SBATCH --requeue",
                 f"#SBATCH --output={tmp_path}/logs/%x-%j.out", "export NCCL_DEBUG=WARN",
                 "export BRIDGE_SCHEDULER_JOB=slurm-chain:ab"]:  # fmt: skip
        assert line in text.splitlines() or line in text, line
    assert f"--output={tmp_path}/logs/%x-%j-node%n.out" in text and "--container-image=nvcr.io/x:1" in text
    assert '--rdzv-endpoint="$head_node:29500"' in text and '--rdzv-id="$SLURM_JOB_ID"' in text
    assert "python -m bridge.cli run --nnodes=2 --nproc-per-node=8" in text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_launch_validates_the_run_before_writing(capsys):
    # 2 nodes x 1 rank with TP=4: does not fit; one error line, nothing printed or submitted
    code = cluster_launch.main(
        [
            "slurm",
            "--nodes",
            "2",
            "--gpus-per-node",
            "1",
            "--cpu",
            "--dry-run",
            "--",
            *TINY,
            "model.tensor_model_parallel_size=4",
        ]  # fmt: skip
    )
    err = capsys.readouterr()
    assert code == 2 and err.out == ""
    assert err.err.startswith("error: world_size") and "= 2:" in err.err and "4 GPUs" in err.err
    assert err.err.count("\n") == 1


def test_launch_dry_run_prints_the_script(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert cluster_launch.main(["slurm", "--nodes", "1", "--gpus-per-node", "2", "--cpu", "--dry-run",
                                "--chain", "3", "--", *TINY]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash") and "#SBATCH --job-name=bridge-llama32-1b-pretrain-config" in out
    assert "gpus-per-node" not in out.split("srun")[0]  # --cpu: no GPUs asked for
    assert "export BRIDGE_SCHEDULER_JOB=slurm-chain:" in out  # the chain's shared identity
    assert "model.vocab_size=1024" in out


def test_plan_prints_a_launch_command_the_launcher_accepts(capsys, monkeypatch):
    import shlex

    from bridge.cli import plan as plan_cli

    monkeypatch.chdir(REPO)
    assert plan_cli.main(["--model", "llama32_1b_pretrain_config", "--gpus", "16", "--launch", "slurm"]) == 0
    command = capsys.readouterr().out.strip()
    words = shlex.split(command)
    assert words[:7] == ["bridge", "launch", "slurm", "--nodes", "2", "--gpus-per-node", "8"], command
    cut = words.index("--")
    # the same layout validated for 2 x 8 CUDA ranks by the launcher (its dry run prints the script)
    assert cluster_launch.main([*words[2:cut], "--dry-run", *words[cut:]]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=8" in script
    # the planner's --gpus-per-node decides the node count; a preset is not a run
    assert plan_cli.main(["--model", "llama32_1b_pretrain_config", "--gpus", "8", "--gpus-per-node", "4",
                          "--launch", "k8s"]) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith(
        "bridge launch k8s --nodes 2 --gpus-per-node 4 --image IMAGE --"
    )
    assert plan_cli.main(["--model", "llama31_8b", "--gpus", "8", "--launch", "slurm"]) == 2
    assert "the launcher runs a recipe" in capsys.readouterr().err
