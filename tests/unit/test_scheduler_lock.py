"""Requeue on another node: a lock left on another host by an attempt of the same scheduler job is taken
over; a different job (or a run outside a scheduler) is still refused (bridge/checkpoint/lock.py)."""

from __future__ import annotations

import json

import pytest

from bridge.checkpoint import lock as lock_mod
from bridge.config.environment import Environment
from bridge.config.scheduler_job import JOB_ENV, scheduler_job
from bridge.errors import ConfigError


def _left_on_other_host(root, job):
    root.mkdir(parents=True, exist_ok=True)
    data = {"pid": 4242, "host": "node-that-died", "started": "then", "proc_start": "1", "job": job}
    (root / lock_mod.LOCK_FILENAME).write_text(json.dumps(data))


def test_requeued_attempt_of_the_same_job_takes_the_lock_over(tmp_path):
    _left_on_other_host(tmp_path, "slurm:c1/1234")
    lock = lock_mod.DirLock(tmp_path, job="slurm:c1/1234")
    note = lock.acquire()
    assert note and "node-that-died" in note and "slurm:c1/1234" in note
    written = json.loads((tmp_path / lock_mod.LOCK_FILENAME).read_text())
    assert written["job"] == "slurm:c1/1234" and written["host"] != "node-that-died"
    lock.release()
    assert not (tmp_path / lock_mod.LOCK_FILENAME).exists()


@pytest.mark.parametrize("mine", ["slurm:c1/1235", "k8s:0b6e-uid", None])
def test_a_different_job_or_no_scheduler_is_refused(tmp_path, mine):
    _left_on_other_host(tmp_path, "slurm:c1/1234")
    with pytest.raises(
        ConfigError, match=r"host node-that-died, scheduler job slurm:c1/1234.*delete the lock file"
    ):
        lock_mod.DirLock(tmp_path, job=mine).acquire()
    assert json.loads((tmp_path / lock_mod.LOCK_FILENAME).read_text())["host"] == "node-that-died"


def test_a_lock_without_a_job_is_refused_to_a_scheduled_run(tmp_path):
    _left_on_other_host(tmp_path, None)
    with pytest.raises(ConfigError, match=r"this run is scheduler job slurm:c1/9"):
        lock_mod.DirLock(tmp_path, job="slurm:c1/9").acquire()


def test_scheduler_job_from_the_environment(monkeypatch):
    assert scheduler_job({}) is None
    assert scheduler_job({"SLURM_JOB_ID": "77", "SLURM_CLUSTER_NAME": "c1"}) == "slurm:c1/77"
    # bridge launch's value wins: one identity for a --dependency chain, the Kubernetes job uid
    assert scheduler_job({"SLURM_JOB_ID": "78", JOB_ENV: "slurm:c1/77"}) == "slurm:c1/77"
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "c2")
    monkeypatch.delenv(JOB_ENV, raising=False)
    assert Environment.detect(cuda=False).scheduler_job == "slurm:c2/5"
