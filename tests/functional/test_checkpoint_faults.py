"""Checkpoint faults on 2 gloo ranks: exact resume with dropout, no re-save of a finished run, iter_*
folders and checkpoint.ckpt_step, retention with a partial folder, damaged checkpoints + fallback, the
config's lr on resume, exit_duration_in_mins, the optimizer state resumed under another TP / DP size
(one launch, ckpt_faults.py); SIGTERM and a second run on
the same directory (run_recipe.py); kill -9 at save stages picked by a seed, synchronous and async saves,
and SIGTERM while an async write is in flight (ckpt_kill.py)."""

from __future__ import annotations

import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.functional.launch import REPO_ROOT, count_launch, free_port, records_by_tag
from tests.functional.workers.train_common import TINY_MODEL

WORKERS = REPO_ROOT / "tests/functional/workers"
pytestmark = pytest.mark.bundled("ckpt_faults.py", "{workdir}", nproc=2)  # the `faults` fixture's case


def _ints(d: dict) -> dict:
    return {int(k): v for k, v in d.items()}


@pytest.fixture(scope="module")
def faults(bundles):  # workers/ckpt_faults.py, in the 2-rank bundled launch (tests/functional/conftest.py)
    return records_by_tag(bundles.run("ckpt_faults.py", "{workdir}", nproc=2).case)


def test_exact_resume_with_dropout(faults):
    ref, resumed = _ints(faults["dropout"]["ref"]), _ints(faults["dropout"]["resumed"])
    assert sorted(resumed) == [4, 5, 6]
    assert {it: resumed[it] for it in (4, 5, 6)} == {it: ref[it] for it in (4, 5, 6)}


def test_resuming_a_finished_run_rewrites_nothing(faults):
    assert faults["finished"] == {"losses": {}, "same_files": True, "latest": 6}


def test_load_accepts_an_iter_folder_and_ckpt_step(faults):
    ref = _ints(faults["dropout"]["ref"])
    got = faults["load_paths"]
    assert _ints(got["folder"]) == {it: ref[it] for it in (4, 5, 6)}
    assert _ints(got["step"]) == {it: ref[it] for it in (4, 5, 6)}
    assert got["b"] == 6


def test_retention_ignores_a_partial_folder(faults):
    got = faults["retention"]
    assert sorted(_ints(got["losses"])) == [7, 8]
    assert got["left"] == [".bridge.lock", "iter_0000008", "latest_checkpointed_iteration.txt"] or got[
        "left"
    ] == [
        "iter_0000008",
        "latest_checkpointed_iteration.txt",
    ]
    assert got["latest"] == 8


@pytest.mark.parametrize(
    "how, named",
    [
        ("truncated shard", r"\.distcp has \d+ bytes, the manifest says \d+"),
        ("deleted shard", r"\.distcp is missing"),
        ("garbage metadata", r"\.metadata (has \d+ bytes|'s bytes differ)"),
        ("bad common.pt", r"(common\.pt|metadata\.json) has \d+ bytes"),
        ("flipped bytes", r"\.distcp's bytes differ from the manifest"),
    ],
)
def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(faults, how, named):
    import re

    got = faults["damaged"][how]
    assert re.search(rf"checkpoint .*iter_0000006 is damaged: .*{named}", got["strict"]), got["strict"]
    assert "checkpoint.fallback_to_previous=true" in got["strict"]
    if how == "flipped bytes":  # resumed from 3: the uninterrupted run's losses
        ref = _ints(faults["dropout"]["ref"])
        assert _ints(got["losses"]) == {4: ref[4]}
        assert got["latest"] == 4
    else:
        loaded, warning = got["loaded"].split(" | ")
        assert loaded == "iter_0000003"
        assert re.search(named, warning) and "loading the previous complete checkpoint" in warning


def test_override_opt_param_scheduler_applies_the_configs_lr(faults):
    got = faults["lr"]
    lrs = _ints(got["lrs"])
    warmup, decay = got["warmup"], got["decay"]
    for it in (4, 5, 6):  # Megatron-Core's cosine schedule by hand, after the step of iteration `it`
        ratio = (it * 8 - warmup) / (decay - warmup)
        expected = 0.001 + (0.01 - 0.001) * 0.5 * (math.cos(math.pi * ratio) + 1.0)
        assert lrs[it] == pytest.approx(expected, rel=1e-12), (it, lrs[it], expected)


def test_exit_duration_saves_and_stops(faults):
    got = faults["duration"]
    assert sorted(_ints(got["losses"])) == [1]
    assert got["reason"].startswith("train.exit_duration_in_mins=1e-05 reached")
    assert got["latest"] == 1


@pytest.mark.parametrize("change", ["tp2_to_tp1", "dp2_to_dp1"])
def test_optimizer_state_reshards_with_fully_reshardable_checkpoints(faults, change):
    """checkpoint.dist_ckpt_optim_fully_reshardable: the checkpoint of iteration 3 resumed under another
    TP / DP size with its optimizer state continues the uninterrupted run (iterations 5 and 6 depend on
    Adam's moments and step; fresh optimizer state would change them)."""
    got = faults[change]
    full, resumed = _ints(got["full"]), _ints(got["resumed"])
    full_norms, resumed_norms = (_ints(n) for n in got["grad_norms"])
    assert sorted(resumed) == [4, 5, 6]
    for it in (4, 5, 6):
        assert resumed[it] == pytest.approx(full[it], rel=1e-6, abs=0), (it, resumed[it], full[it])
        assert resumed_norms[it] == pytest.approx(full_norms[it], rel=1e-6, abs=0)


# --- real kills and signals (separate launches) -------------------------------------------------

STAGES = ["staging_created", "shards_written", "manifest_written", "published", "tracked", "done"]
LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ .*?lm loss: (\S+)")


def _launch(script: Path, nproc: int, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", str(script), *args]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    env.pop("PYTHONUNBUFFERED", None)
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip


class _Output:
    """A launch's output lines as they come (a reader thread), so that a process still holding the
    pipe after the launcher ended (an orphaned writer) shows as a timeout instead of a hang."""

    def __init__(self, proc: subprocess.Popen, script: Path, nproc: int):
        import queue
        import threading

        self.proc, self.seen, self.q, self.ended = proc, [], queue.Queue(), False
        self.script, self.nproc, self.started = script, nproc, time.monotonic()
        threading.Thread(
            target=lambda: [*map(self.q.put, proc.stdout), self.q.put(None)], daemon=True
        ).start()

    def lines(self, timeout: float = 300):
        import queue

        deadline = time.monotonic() + timeout
        while not self.ended:
            try:
                line = self.q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.fail("no output for too long")
            if line is None:
                self.ended = True
                return
            self.seen.append(line.rstrip())
            yield line

    def fail(self, why: str):
        os.killpg(self.proc.pid, signal.SIGKILL)
        raise AssertionError(why + "\n" + "\n".join(self.seen[-80:]))

    def finish(self, timeout: float = 120) -> int:
        """Exit status once the launcher has ended and every process has let go of its output."""
        for _ in self.lines(timeout):
            pass
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.fail("the launcher did not exit")
        finally:
            count_launch(self.script, self.nproc, self.started)


def _leftover_processes(token: str) -> list[str]:
    """Processes (not zombies) whose command line mentions `token` (the run's own folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmd and state != "Z":
            found.append(f"{pid}: {cmd}")
    return found


def _no_leftovers(token: str) -> None:
    deadline = time.monotonic() + 10
    while (left := _leftover_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, left


def _complete_and_verified(root: Path) -> list[int]:
    from bridge.checkpoint import manifest, paths

    its = paths.complete_iterations(root)
    for it in its:
        assert manifest.verify(paths.checkpoint_dir(root, it)) == [], it
    return its


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_kill_9_at_seeded_points_of_saves_never_loses_a_checkpoint(tmp_path, mode):
    """async: each writer sleeps 1 s first, so the next steps run while it writes; the kill points
    include `write_started` (the writer forked, the loop going on)."""
    from bridge.checkpoint import paths

    seed = int(os.environ.get("BRIDGE_FAULT_SEED", "11"))
    rng = random.Random(seed)
    stages = STAGES if mode == "sync" else ["write_started", *STAGES]
    root = tmp_path / "ck"
    losses: dict[int, set[str]] = {}
    tracked, log = 0, []
    for round_ in range(3):
        final = round_ == 2
        it = min(6, tracked + rng.choice([1, 2]))
        stage, victims = rng.choice(stages), rng.choice(["all", "0", "1"])
        if stage in ("published", "tracked"):  # rank 0's stages
            victims = victims if victims != "1" else "all"
        delay = rng.uniform(0.0, 0.3)
        proc = _launch(WORKERS / "ckpt_kill.py", 2, str(tmp_path), mode)
        out, pids, killed = _Output(proc, WORKERS / "ckpt_kill.py", 2), {}, False
        for line in out.lines():
            # two ranks' lines can meet on one line of the merged output: find every marker in it
            for r, pid in re.findall(r"@@pid (\d+) (\d+)", line):
                pids[r] = int(pid)
            m = LOSS.search(line)
            if m:
                losses.setdefault(int(m.group(1)), set()).add(m.group(2))
            if not final and f"@@stage {stage} {it} " in line:
                time.sleep(delay)
                for r in ["0", "1"] if victims == "all" else [victims]:
                    os.kill(pids[r], signal.SIGKILL)
                killed = True
                break
        rc = out.finish()
        log.append(
            f"round {round_} ({mode}): kill at {stage} of iteration {it} (+{delay:.2f} s), ranks {victims}: "
            f"rc {rc}"
        )
        assert killed or final, "\n".join(log + out.seen[-60:])
        assert (rc == 0) == final, "\n".join(log + out.seen[-60:])
        _no_leftovers(str(tmp_path))
        now = paths.latest_iteration(root)
        complete = _complete_and_verified(root)
        assert now is not None and now >= tracked and now in complete, (log, now, complete)
        assert len([i for i in complete if i <= now]) <= 2  # most_recent_k=2 counts complete ones only
        tracked = now
    assert tracked == 6 and _complete_and_verified(root) == [5, 6], log
    assert sorted(losses) == [1, 2, 3, 4, 5, 6]
    assert all(len(v) == 1 for v in losses.values()), losses  # replayed iterations are bit-identical


def test_sigterm_saves_and_exits_0_and_a_second_run_is_refused(tmp_path):
    from bridge.checkpoint import paths

    save = tmp_path / "ck"
    args = ["--recipe", "llama32_1b_pretrain_config",
            *TINY_MODEL,
            "train.train_iters=100000", "train.global_batch_size=8", "train.micro_batch_size=1",
            "scheduler.lr_warmup_iters=1", "validation.eval_interval=0", "checkpoint.save_interval=0",
            "logger.log_interval=1", "dataset.num_workers=0", f"checkpoint.save={save}"]  # fmt: skip
    proc = _launch(REPO_ROOT / "scripts/training/run_recipe.py", 2, *args)
    out = _Output(proc, REPO_ROOT / "scripts/training/run_recipe.py", 2)
    for line in out.lines():
        if re.search(r"iteration\s+3/", line):
            break
    # a second run on the same directory: one error line naming the owner and the lock file, exit 2
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    second = subprocess.run([sys.executable, str(REPO_ROOT / "scripts/training/run_recipe.py"), *args],
                            env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert second.returncode == 2, second.stderr[-3000:]
    errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "is in use by another run (pid" in errors[0] and ".bridge.lock" in errors[0]
    assert "Traceback" not in second.stderr
    # SIGTERM to rank 1 only: both ranks stop after the same step, save, and exit 0
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    rank1 = [int(c) for c in children if b"RANK=1\0" in Path(f"/proc/{c}/environ").read_bytes()]
    os.kill(rank1[0], signal.SIGTERM)
    rc = out.finish()
    lines = out.seen
    assert rc == 0, "\n".join(lines[-60:])
    said = [ln for ln in lines if "received SIGTERM at iteration" in ln]
    assert len(said) == 1, lines[-40:]
    m = re.search(r"received SIGTERM at iteration (\d+): saved checkpoint (\S+); exiting", said[0])
    assert m, said
    assert paths.latest_iteration(save) == int(m.group(1)) and m.group(2) == str(
        paths.checkpoint_dir(save, int(m.group(1)))
    )
    assert _complete_and_verified(save) == [int(m.group(1))]
    assert not (save / ".bridge.lock").exists()
    assert not any("Traceback" in ln for ln in lines)


def _forked_children(pid: int) -> list[int]:
    """The processes `pid` forked (same command line): its checkpoint writers, not the spawned server."""
    own = Path(f"/proc/{pid}/cmdline").read_bytes()
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                if Path(f"/proc/{child}/cmdline").read_bytes() == own:
                    found.append(int(child))
            except OSError:
                continue
    return found


def test_sigterm_during_an_async_write_finishes_it_and_exits_0(tmp_path):
    """SIGTERM to both ranks and their writers (as a signal to the process group reaches them) while the
    write of iteration 2 is in flight: the writers go on, the ranks finish the write, publish it, and
    exit 0 with the one stop line naming a complete checkpoint."""
    from bridge.checkpoint import paths

    proc = _launch(WORKERS / "ckpt_kill.py", 2, str(tmp_path), "async")
    out, pids, writers = _Output(proc, WORKERS / "ckpt_kill.py", 2), {}, []
    for line in out.lines():
        for r, pid in re.findall(r"@@pid (\d+) (\d+)", line):
            pids[r] = int(pid)
        if "@@stage write_started 2 0" in line:
            writers = [w for p in pids.values() for w in _forked_children(p)]
            for p in [*pids.values(), *writers]:
                os.kill(p, signal.SIGTERM)
            break
    rc = out.finish()
    lines = out.seen
    assert writers, "no writer was in flight when the signal was sent"
    assert rc == 0, "\n".join(lines[-60:])
    said = [ln for ln in lines if "received SIGTERM at iteration" in ln]
    assert len(said) == 1, lines[-40:]
    m = re.search(r"received SIGTERM at iteration (\d+): saved checkpoint (\S+); exiting", said[0])
    assert m, said
    stopped = int(m.group(1))
    root = tmp_path / "ck"
    assert stopped >= 2 and paths.latest_iteration(root) == stopped
    assert m.group(2) == str(paths.checkpoint_dir(root, stopped))
    assert _complete_and_verified(root)[-1] == stopped and 2 in _complete_and_verified(root)
    assert not list(root.glob(".iter_*"))  # no staging folder left behind
    _no_leftovers(str(tmp_path))
    assert not any("Traceback" in ln for ln in lines)
