"""A re-run resumes or refuses before training; a save at an existing iteration keeps only a proven
identical state; a full disk is one error; a garbage tracker falls back; a bridge checkpoint without
its manifest is damaged; a resume says which config values it leaves unused (issue 27)."""

from __future__ import annotations

import errno
import os
from types import SimpleNamespace

import pytest

from bridge.checkpoint import disk_full, manifest, paths, same_state
from bridge.config.checks.checkpoint import resume_plan
from bridge.config.container import ConfigContainer
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider


def _config(save, *, lr: float = 3e-4, hidden: int = 64, iters: int = 10) -> ConfigContainer:
    model = GPTModelProvider(num_layers=2, hidden_size=hidden, num_attention_heads=4, vocab_size=1024,
                             seq_length=128)  # fmt: skip
    cfg = ConfigContainer(model=model)
    cfg.train.global_batch_size = 8
    cfg.train.train_iters = iters
    cfg.scheduler.lr_warmup_iters = 2
    cfg.optimizer.lr = lr
    cfg.checkpoint.save = str(save) if save else None
    return cfg


def _saved_by(cfg: ConfigContainer, root, it: int, *, track: bool = True) -> None:
    """A complete checkpoint of iteration `it` whose run_config.yaml is `cfg`'s (as a run saves it)."""
    resolved = build_plan(cfg, 1, cuda=False).config  # what pretrain writes: the plan's resolved config
    folder = paths.checkpoint_dir(root, it)
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text("{}")
    (folder / "__0_0.distcp").write_bytes(os.urandom(256))
    (folder / paths.RUN_CONFIG_FILENAME).write_text(resolved.to_yaml())
    manifest.write_manifest(folder, {"iteration": it})
    if track:
        paths.write_tracker(root, it)


def test_a_rerun_of_the_same_config_resumes_its_own_checkpoints(tmp_path):
    save = tmp_path / "ck"
    assert resume_plan(_config(save)).source == "scratch"  # nothing there yet
    _saved_by(_config(save), save, 4)
    # the same command again, and one that only trains longer and logs differently
    again = _config(save, iters=20)
    again.logger.log_interval = 1
    plan = build_plan(again, 1, cuda=False)
    assert (plan.resume.source, plan.resume.load, plan.resume.iteration) == ("checkpoint.save", str(save), 4)
    assert not plan.resume.finished
    assert any(line.startswith(f"checkpoint: resume from {save}") for line in plan.summary_lines())


def test_a_finished_run_rerun_is_planned_as_finished(tmp_path):
    save = tmp_path / "ck"
    _saved_by(_config(save, iters=4), save, 4)
    plan = build_plan(_config(save, iters=4), 1, cuda=False)
    assert plan.resume.finished and "the run is finished" in plan.resume.describe()


@pytest.mark.parametrize("change", ["lr", "hidden"])
def test_checkpoints_of_another_config_are_refused_before_training(tmp_path, change):
    save = tmp_path / "ck"
    _saved_by(_config(save), save, 2)
    _saved_by(_config(save), save, 4)
    other = _config(save, lr=1e-3) if change == "lr" else _config(save, hidden=128)
    with pytest.raises(ConfigError) as err:
        build_plan(other, 1, cuda=False)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint.save = {str(save)!r}: holds checkpoints (iterations 2, 4)")
    assert ("optimizer.lr: 0.0003 -> 0.001" if change == "lr" else "model.hidden_size: 64 -> 128") in msg
    assert "checkpoint.overwrite=true" in msg and f"checkpoint.save={save}_2" in msg
    # loading them is a way out only where the model is the same (another shape would not load)
    assert (f"checkpoint.load={save}" in msg) == (change == "lr")
    other.checkpoint.overwrite = True
    assert build_plan(other, 1, cuda=False).resume.source == "overwrite"
    other.checkpoint.overwrite = False
    if change == "lr":
        other.checkpoint.load = str(save)
        assert build_plan(other, 1, cuda=False).resume.source == "checkpoint.load"


def test_a_checkpoint_without_run_config_is_not_taken_for_this_run(tmp_path):
    save = tmp_path / "ck"
    _saved_by(_config(save), save, 2)
    (paths.checkpoint_dir(save, 2) / paths.RUN_CONFIG_FILENAME).unlink()
    manifest.write_manifest(paths.checkpoint_dir(save, 2), {"iteration": 2})
    with pytest.raises(ConfigError, match="has no run_config.yaml"):
        build_plan(_config(save), 1, cuda=False)


def test_a_garbage_tracker_falls_back_to_the_newest_complete_checkpoint(tmp_path):
    for it in (2, 4):
        folder = paths.checkpoint_dir(tmp_path, it)
        folder.mkdir()
        (folder / "metadata.json").write_text("{}")
        manifest.write_manifest(folder, {"iteration": it})
    (tmp_path / paths.TRACKER_FILENAME).write_text("\x00garbage")
    found, may_fall_back = paths.checkpoint_candidates(tmp_path)
    assert [it for _, it in found] == [4, 2] and may_fall_back
    assert "not an iteration number" in paths.tracker_problem(tmp_path)
    assert paths.tracker_problem(tmp_path / "nothing") is None


def test_same_state_needs_the_fingerprint_the_samples_and_intact_files(tmp_path):
    folder = paths.checkpoint_dir(tmp_path, 6)
    folder.mkdir()
    (folder / "metadata.json").write_text("{}")
    (folder / "__0_0.distcp").write_bytes(b"x" * 100)
    state = {"iteration": 6, "consumed_train_samples": 48, "weights_fingerprint": "abc"}
    manifest.write_manifest(folder, state)
    assert same_state.holds_same_state(folder, state)
    assert not same_state.holds_same_state(folder, {**state, "weights_fingerprint": "abd"})
    assert not same_state.holds_same_state(folder, {**state, "consumed_train_samples": 40})
    assert not same_state.holds_same_state(folder, {"iteration": 6})  # no fingerprint: nothing proven
    (folder / "__0_0.distcp").write_bytes(b"y" * 100)  # same size, other bytes
    assert not same_state.holds_same_state(folder, state)


def test_human_sizes_never_read_zero():
    assert disk_full.human_size(2 * 2**20) == "2.00 MiB"
    assert disk_full.human_size(3 * 2**30) == "3.00 GiB"
    assert disk_full.human_size(512) == "512 bytes"
    assert disk_full.gib(2 * 2**20) == "0.00195 GiB"  # the up-front check of a 2 MB disk


def test_a_full_disk_during_a_save_is_one_error_and_leaves_nothing(tmp_path, monkeypatch):
    """The writer is replaced by one that fails as a full disk does (ENOSPC); the functional test
    fills a real tmpfs."""
    from bridge.checkpoint import save_load

    root = tmp_path / "ck"
    folder = paths.checkpoint_dir(root, 2)
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(b"x" * 3 * 2**20)
    manifest.write_manifest(folder, {"iteration": 2})
    paths.write_tracker(root, 2)

    def full_disk(staging, iteration, *args):
        (staging / "__0_0.distcp").write_bytes(b"y" * 2**20)
        raise RuntimeError(
            "[enforce fail at inline_container.cc:664] . unexpected pos 704 vs 598"
        ) from OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(save_load, "_write_staging", full_disk)
    with pytest.raises(ConfigError) as err:
        save_load.save_checkpoint(root, 4, [], None)
    msg = str(err.value)
    assert msg.startswith(
        f"checkpoint.save = {str(root)!r}: no space left on the device while saving iteration 4"
    )
    assert (
        "free after removing the unfinished save" in msg
        and "needs about 3.00 MiB); the last complete checkpoint iter_0000002 is kept" in msg
    )
    assert sorted(p.name for p in root.iterdir()) == ["iter_0000002", paths.TRACKER_FILENAME]


def test_a_failed_save_that_is_not_a_full_disk_keeps_its_error(tmp_path, monkeypatch):
    from bridge.checkpoint import save_load

    def broken(staging, iteration, *args):
        raise KeyError("a bug")

    monkeypatch.setattr(save_load, "_write_staging", broken)
    monkeypatch.setattr(disk_full, "NEARLY_FULL_BYTES", 0)
    with pytest.raises(KeyError):
        save_load.save_checkpoint(tmp_path / "ck", 4, [], None)
    assert not paths.staging_dir(tmp_path / "ck", 4).exists()


def test_a_bridge_checkpoint_without_its_manifest_is_damaged(tmp_path):
    import torch

    from bridge.checkpoint.save_load import _check_folder

    folder = paths.checkpoint_dir(tmp_path, 3)
    folder.mkdir()
    (folder / "metadata.json").write_text('{"sharded_backend": "torch_dist", "sharded_backend_version": 1, '
                                          '"common_backend": "torch", "common_backend_version": 1}')  # fmt: skip
    torch.save({"checkpoint_content": {"optimizer": False, "manifest": True}}, folder / "common.pt")
    (folder / paths.RUN_CONFIG_FILENAME).write_text("model: {}\n")
    paths.write_tracker(tmp_path, 3)
    problems = _check_folder(folder, verify=True)
    assert len(problems) == 1 and problems[0].startswith("manifest.json is missing (bridge writes one")
    # saved before bridge wrote manifests (no such mark), or by Megatron-LM: checked for metadata.json only
    torch.save({"checkpoint_content": {"optimizer": False}}, folder / "common.pt")
    assert _check_folder(folder, verify=True) == []
    torch.save({"iteration": 3}, folder / "common.pt")
    assert _check_folder(folder, verify=True) == []


def test_a_resume_names_the_values_it_leaves_unused():
    from bridge.training.resume import ignored_on_resume

    cfg = _config(None, lr=1e-3, iters=5)
    kept = SimpleNamespace(max_lr=3e-4, min_lr=cfg.optimizer.min_lr)
    cfg.scheduler.override_opt_param_scheduler = False
    notes = ignored_on_resume(cfg, 8, kept)
    assert len(notes) == 2
    assert notes[0].startswith(
        "train.train_iters=5 is below the checkpoint's iteration 8: nothing is trained"
    )
    assert notes[1].startswith(
        "optimizer.lr=0.001 is not used: the checkpoint's learning-rate schedule (0.0003)"
    )
    cfg.scheduler.override_opt_param_scheduler = True
    assert ignored_on_resume(cfg, 4, kept) == []


def test_indexed_token_ids_beyond_the_vocabulary_are_one_error_naming_the_file(tmp_path):
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    from bridge.training.data.token_ids import check_indexed_token_ids

    good, bad = str(tmp_path / "good"), str(tmp_path / "bad")
    for prefix, top in ((good, 511), (bad, 600)):
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
        builder.add_document(torch.tensor([1, 2, 3, 4], dtype=torch.int64), [4])
        builder.add_document(torch.tensor([5, top, 7], dtype=torch.int64), [3])
        builder.finalize(prefix + ".idx")
    check_indexed_token_ids([good], 512)
    with pytest.raises(ConfigError) as err:
        check_indexed_token_ids([good, bad], 512)
    assert str(err.value).startswith(
        f"dataset.data_paths: {bad}.bin: token id 600 (at token 5) is outside the tokenizer's ids 0..511"
    )


def test_overwrite_applies_once_to_the_run_it_starts(tmp_path):
    """checkpoint.overwrite=true (issue 42): the first start retires the older history (moved whole, once)
    and marks the new run; a relaunch of the same command resumes the new run's checkpoints; another
    config with the flag retires them in turn."""
    from bridge.checkpoint.overwrite import MARKER_FILENAME, apply_overwrite

    save = tmp_path / "ck"
    _saved_by(_config(save, lr=1e-3), save, 2)
    _saved_by(_config(save, lr=1e-3), save, 4)
    old = (paths.checkpoint_dir(save, 4) / "__0_0.distcp").read_bytes()
    cmd = _config(save)
    cmd.checkpoint.overwrite = True
    assert resume_plan(cmd).source == "overwrite"
    line = apply_overwrite(save)  # what prepare_save_dir does on rank 0 under the lock
    assert "moved the previous run's checkpoints (iterations 2, 4) to" in line
    (retired,) = [p for p in save.iterdir() if p.name.startswith(".overwritten-")]
    assert sorted(p.name for p in retired.iterdir()) == [
        "iter_0000002", "iter_0000004", paths.TRACKER_FILENAME]  # fmt: skip
    assert (retired / "iter_0000004" / "__0_0.distcp").read_bytes() == old  # moved, not rewritten
    assert sorted(p.name for p in save.iterdir()) == [MARKER_FILENAME, retired.name]
    assert resume_plan(cmd).source == "scratch"  # preempted before its first save: starts again
    assert "nothing to replace" in apply_overwrite(save)
    assert sorted(p.name for p in save.iterdir()) == [MARKER_FILENAME, retired.name]
    _saved_by(_config(save), save, 2)  # the new run's first checkpoint
    plan = build_plan(cmd, 1, cuda=False)  # the relaunch of the same command
    assert (plan.resume.source, plan.resume.iteration) == ("checkpoint.save", 2)
    other = _config(save, lr=5e-4)
    other.checkpoint.overwrite = True
    assert resume_plan(other).source == "overwrite"  # another config: replaces the marked run
