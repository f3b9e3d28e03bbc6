"""The checkpoint package's invariants without processes: what counts as a checkpoint, retention,
leftover cleanup, load candidates, the directory lock, the manifest, the pre-flight checks; and the
data / tokenizer mistakes that are one error line each."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from bridge.checkpoint import lock as lock_mod
from bridge.checkpoint import manifest, paths, preflight
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError


def _ckpt(root, it, *, with_manifest=True, files=("metadata.json", "common.pt", "__0_0.distcp")):
    folder = paths.checkpoint_dir(root, it)
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).write_bytes(os.urandom(64) + name.encode())
    if with_manifest:
        manifest.write_manifest(folder, {"iteration": it})
    return folder


# --- what counts, retention, cleanup ------------------------------------------------------------


def test_partial_folder_never_counts_and_retention_keeps_complete_ones(tmp_path):
    for it in (2, 4):
        _ckpt(tmp_path, it)
    paths.write_tracker(tmp_path, 4)
    _ckpt(tmp_path, 6, with_manifest=False)  # a legacy save that crashed after its shards
    (tmp_path / "iter_0000008").mkdir()  # an empty leftover
    assert paths.complete_iterations(tmp_path) == [2, 4]
    _ckpt(tmp_path, 5)
    paths.write_tracker(tmp_path, 5)
    assert paths.remove_old_checkpoints(tmp_path, keep=1, newest=5) == [2, 4]
    assert paths.complete_iterations(tmp_path) == [5]  # the partial 6 did not push 5 out


def test_legacy_checkpoint_without_manifest_counts_when_tracked(tmp_path):
    _ckpt(tmp_path, 3, with_manifest=False)
    assert paths.complete_iterations(tmp_path) == []  # untracked: a crashed save
    paths.write_tracker(tmp_path, 3)
    assert paths.complete_iterations(tmp_path) == [3]


def test_clean_leftovers(tmp_path):
    _ckpt(tmp_path, 2)
    paths.write_tracker(tmp_path, 2)
    paths.staging_dir(tmp_path, 4).mkdir()
    _ckpt(tmp_path, 6, with_manifest=False)
    # .replaced whose replacement was published: removed; whose replacement never came: restored
    _ckpt(tmp_path, 8)
    shutil.copytree(paths.checkpoint_dir(tmp_path, 8), paths.replaced_dir(tmp_path, 8))
    _ckpt(tmp_path, 9)
    os.replace(paths.checkpoint_dir(tmp_path, 9), paths.replaced_dir(tmp_path, 9))
    (tmp_path / (paths.TRACKER_FILENAME + ".tmp")).write_text("9")
    notes = paths.clean_leftovers(tmp_path)
    assert len(notes) == 4, notes
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["iter_0000002", "iter_0000008", "iter_0000009", paths.TRACKER_FILENAME]
    assert manifest.verify(paths.checkpoint_dir(tmp_path, 9)) == []


def test_load_candidates(tmp_path):
    for it in (2, 4, 6):
        _ckpt(tmp_path, it)
    paths.write_tracker(tmp_path, 6)
    _ckpt(tmp_path, 8, with_manifest=False)
    root = [(p.name, it) for p, it in paths.checkpoint_candidates(tmp_path)[0]]
    assert root == [("iter_0000006", 6), ("iter_0000004", 4), ("iter_0000002", 2)]
    assert paths.checkpoint_candidates(tmp_path)[1] is True  # fallback allowed for the tracker's choice
    one, fallback = paths.checkpoint_candidates(tmp_path / "iter_0000004")
    assert [(p.name, it) for p, it in one] == [("iter_0000004", 4)] and fallback is False
    step, fallback = paths.checkpoint_candidates(tmp_path, 2)
    assert [(p.name, it) for p, it in step] == [("iter_0000002", 2)] and fallback is False
    assert paths.checkpoint_candidates(tmp_path / "empty") == ([], False)


# --- manifest ----------------------------------------------------------------------------------


def test_manifest_catches_truncation_deletion_garbage_and_flipped_bytes(tmp_path):
    folder = _ckpt(tmp_path, 1, files=("metadata.json", "common.pt", "__0_0.distcp", "__1_0.distcp"))
    assert manifest.verify(folder) == []
    shard = folder / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[10:74] = bytes(b ^ 0xFF for b in data[10:74])  # 64 flipped bytes, same size
    shard.write_bytes(bytes(data))
    assert manifest.verify(folder) == [
        "__0_0.distcp's bytes differ from the manifest (crc32 mismatch: the file was modified or is corrupt)"
    ]
    (folder / "__1_0.distcp").unlink()
    (folder / "common.pt").write_bytes(b"x")
    problems = manifest.verify(folder)
    assert "__1_0.distcp is missing" in problems
    assert any(p.startswith("common.pt has 1 bytes, the manifest says") for p in problems)
    (folder / "manifest.json").write_text("{garbage")
    assert manifest.verify(folder)[0].startswith("manifest.json is unreadable")


# --- lock --------------------------------------------------------------------------------------


def _lock_file(root, pid, host=None, proc_start=None):
    root.mkdir(parents=True, exist_ok=True)
    data = {"pid": pid, "host": host or socket.gethostname(), "started": "then", "proc_start": proc_start}
    (root / lock_mod.LOCK_FILENAME).write_text(json.dumps(data))


def test_lock_refuses_a_live_owner_and_takes_over_a_stale_one(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock_file(tmp_path, sleeper.pid, proc_start=lock_mod._proc_start(sleeper.pid))
        with pytest.raises(ConfigError, match=rf"in use by another run \(pid {sleeper.pid} on host") as err:
            lock_mod.DirLock(tmp_path).acquire()
        assert str(tmp_path / lock_mod.LOCK_FILENAME) in str(err.value)
    finally:
        sleeper.kill()
        sleeper.wait()
    note = lock_mod.DirLock(tmp_path).acquire()  # the owner is gone
    assert note and f"process {sleeper.pid} no longer exists" in note
    _lock_file(tmp_path / "other", 1, host="some-other-host")
    with pytest.raises(ConfigError, match="host some-other-host.*if it is gone, delete the lock file"):
        lock_mod.DirLock(tmp_path / "other").acquire()


def test_lock_release_and_reuse(tmp_path):
    first = lock_mod.DirLock(tmp_path)
    assert first.acquire() is None
    first.release()
    assert not (tmp_path / lock_mod.LOCK_FILENAME).exists()
    assert lock_mod.DirLock(tmp_path).acquire() is None


# --- pre-flight: writable, room ----------------------------------------------------------------


def _plan(*overrides):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "functional/workers"))
    from train_common import tiny_config

    return build_plan(tiny_config(*overrides), 1, cuda=False)


def test_unwritable_save_dir_is_one_error_before_training(tmp_path):
    (tmp_path / "file").write_text("x")
    plan = _plan(f"checkpoint.save={tmp_path}/dir")
    object.__setattr__(plan.config.checkpoint, "save", str(tmp_path / "file" / "ckpt"))
    with pytest.raises(
        ConfigError, match=r"checkpoint.save = .*file/ckpt': cannot write there \(Not a directory"
    ):
        preflight.prepare_save_dir(plan)


def test_save_dir_without_room_is_one_error(tmp_path, monkeypatch):
    plan = _plan(f"checkpoint.save={tmp_path}/ckpt")
    need, how = preflight.checkpoint_bytes(plan)
    # tied embedding 256x64; per layer q 4 heads x 64, kv 2 groups x 64 x 2, out, gated MLP 3 x 64 x 128,
    # 2 norms; final norm. fp32 on CPU: weights 4 + main params 4 + Adam moments 8 bytes each.
    n = 256 * 64 + 4 * (4 * 64 * 64 + 2 * 2 * 64 * 64 + 64 * 4 * 64 + 3 * 64 * 128 + 2 * 64) + 64
    assert (need, how) == (n * 16, f"{n / 1e6:.1f} M parameters x 16 bytes")
    free = shutil.disk_usage(tmp_path).free
    monkeypatch.setattr(
        preflight.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(free, free, need - 1)
    )
    with pytest.raises(ConfigError, match=r"GiB free, but one checkpoint of this run needs about"):
        preflight.prepare_save_dir(plan)
    assert not (tmp_path / "ckpt" / lock_mod.LOCK_FILENAME).exists()  # released again
    monkeypatch.undo()
    guard = preflight.prepare_save_dir(plan)
    assert (tmp_path / "ckpt" / lock_mod.LOCK_FILENAME).exists()
    guard.release()


# --- config rules ------------------------------------------------------------------------------


def test_ckpt_step_and_exit_signal_rules(tmp_path):
    _ckpt(tmp_path, 2)
    with pytest.raises(ConfigError, match=r"iter_0000003 does not exist \(checkpoints in .*: 2\)"):
        _plan(f"checkpoint.load={tmp_path}", "checkpoint.ckpt_step=3")
    with pytest.raises(ConfigError, match="checkpoint.load already names one checkpoint"):
        _plan(f"checkpoint.load={tmp_path}/iter_0000002", "checkpoint.ckpt_step=2")
    with pytest.raises(ConfigError, match="checkpoint.ckpt_step = 2: picks an iteration of checkpoint.load"):
        _plan("checkpoint.ckpt_step=2")
    assert _plan(f"checkpoint.load={tmp_path}", "checkpoint.ckpt_step=2").config.checkpoint.ckpt_step == 2
    assert _plan("train.exit_signal=SIGUSR1").config.train.exit_signal == "SIGUSR1"
    with pytest.raises(
        ConfigError, match="train.exit_signal = 'SIGKILL': must name a signal that can be caught"
    ):
        _plan("train.exit_signal=SIGKILL")
    with pytest.raises(ConfigError, match="train.exit_duration_in_mins"):
        _plan("train.exit_duration_in_mins=0")


# --- the non-finite stop names the last checkpoint whose weights are finite ---------------------


def test_last_finite_checkpoint(tmp_path):
    from bridge.training.saves import last_checkpoint_note as _last_checkpoint_note

    for it, finite in ((2, True), (4, True), (6, False)):
        folder = paths.checkpoint_dir(tmp_path, it)
        folder.mkdir()
        (folder / "common.pt").write_bytes(b"x")
        manifest.write_manifest(folder, {"weights_finite": finite, "max_abs_weight": 1e30, "lm_loss": 5.5})
    note = _last_checkpoint_note(str(tmp_path))
    assert note == (
        f"the last checkpoint with finite weights is iteration 4 ({tmp_path}/iter_0000004: lm loss 5.5, "
        "largest |weight| 1e+30)"
    )
    assert _last_checkpoint_note(None) == "nothing was saved"


# --- data and tokenizer mistakes: one ConfigError naming the file and line -----------------------


def _jsonl_datasets(tmp_path, text: str, tokenizer):
    from bridge.training.data.jsonl import build_jsonl_datasets

    f = tmp_path / "d.jsonl"
    f.write_text('{"text": "1"}\n')  # valid while planning (validation reads the first document) ...
    plan = _plan("dataset.kind=jsonl", f"dataset.data_paths=[{f}]", 'dataset.split="1,0,0"')
    f.write_text(text)  # ... then the loader's own checks meet the mistake
    return f, lambda: build_jsonl_datasets(plan.data, tokenizer)


def test_jsonl_and_tokenizer_mistakes_are_one_error_each(tmp_path):
    from bridge.config.sections import TokenizerConfig
    from bridge.training.data.tokenizer import NullTokenizer, build_tokenizer

    null = NullTokenizer(255)
    f, build = _jsonl_datasets(tmp_path, "\n\n", null)
    with pytest.raises(ConfigError, match=rf"{f} holds no documents \(empty file\)"):
        build()
    f, build = _jsonl_datasets(tmp_path, '{"text": "1 2 3"}\n{"text": 5}\n', null)
    with pytest.raises(ConfigError, match=rf"{f}:2: 'text' is int 5, not a string"):
        build()
    f, build = _jsonl_datasets(tmp_path, '{"text": "1 2 3"}\n{"text": "the cat"}\n', null)
    with pytest.raises(
        ConfigError, match=rf"{f}:2: the NullTokenizer reads whitespace-separated token ids, and 'the'"
    ):
        build()
    f, build = _jsonl_datasets(tmp_path, '{"text": "1 2 300"}\n', null)
    with pytest.raises(ConfigError, match=rf"{f}:1: token id 300 is outside the NullTokenizer's ids 0..255"):
        build()
    missing = str(tmp_path / "no-such-tokenizer")
    with pytest.raises(ConfigError, match=rf"tokenizer.tokenizer_model='{missing}' does not exist"):
        build_tokenizer(TokenizerConfig(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=missing), 1024)
