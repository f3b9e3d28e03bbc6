"""Knowledge distillation's rules (issue 48): the teacher is planned on the student's layout, and what
cannot be placed or compared is one ConfigError before launch naming the field, the value and the reason.
The KD loss itself is checked against transformers + torch in tests/functional/test_distill_parity.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bridge.config.compose import compose
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from recipes import get_recipe
from tests.finetune_fixtures import make_tiny_llama, write_sft_jsonl


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("distill")
    student = make_tiny_llama(root / "student")
    teacher = make_tiny_llama(root / "teacher", seed=1, num_hidden_layers=3)
    data = root / "sft.jsonl"
    write_sft_jsonl(data, 4)
    return student, teacher, data


def with_config_json(src: Path, dst: Path, **changes) -> Path:
    """A copy of a Hugging Face folder whose config.json differs by `changes` (the rules read config.json)."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **changes}))
    return dst


def config(folders, teacher: Path | str, *extra: str):
    student, _, data = folders
    cfg, _ = compose(
        get_recipe("llama32_1b_distill_config")(),
        overrides=[
            f"checkpoint.pretrained_checkpoint={student}",
            f"distill.teacher={teacher}",
            f"dataset.data_paths=[{data}]",
            'dataset.split="1,0,0"',
            "model.seq_length=32",
            "train.global_batch_size=2",
            "train.train_iters=2",
            "validation.eval_interval=0",
            "scheduler.lr_warmup_iters=0",
            "checkpoint.save=null",
            "checkpoint.save_interval=0",
            "logger.tensorboard_dir=null",
            *extra,
        ],
    )
    return cfg


def test_the_teacher_is_planned_with_its_own_shape_on_the_students_layout(folders):
    plan = build_plan(config(folders, folders[1], "model.tensor_model_parallel_size=2"), 2, cuda=False)
    d = plan.distill
    assert d.teacher.num_layers == 3 and plan.provider.num_layers == 2  # the teacher's own config.json
    assert d.teacher.tensor_model_parallel_size == 2  # the student's layout
    assert (d.temperature, d.skip_lm_loss, d.top_k) == (1.0, True, None)
    assert any(
        line.startswith(f"objective: distillation from {folders[1]} (3 layers")
        for line in plan.summary_lines()
    )


def test_another_vocabulary_is_one_error(folders, tmp_path):
    teacher = with_config_json(folders[1], tmp_path / "t", vocab_size=100)
    with pytest.raises(
        ConfigError, match=r"distill.teacher = .*its vocabulary has 100 tokens and the student's"
    ):
        build_plan(config(folders, teacher), 1, cuda=False)


def test_a_teacher_the_layout_cannot_hold_is_refused_with_the_reason(folders):
    # 3 teacher layers cannot split over 2 pipeline stages (the student's 2 can)
    with pytest.raises(ConfigError, match=r"distill.teacher = .*cannot be placed on the student's layout"):
        build_plan(config(folders, folders[1], "model.pipeline_model_parallel_size=2"), 2, cuda=False)


@pytest.mark.parametrize(
    "override, match",
    [
        (
            "distill.logit_kl_temperature=0",
            r"distill.logit_kl_temperature = 0.0: must be a finite number > 0",
        ),
        ("distill.top_k=0", r"distill.top_k = 0: must be null or an integer >= 1"),
        ("model.context_parallel_size=2", r"model.context_parallel_size = 2: the teacher's logits"),
    ],
)
def test_bad_distill_settings_are_one_error_each(folders, override, match):
    with pytest.raises(ConfigError, match=match):
        build_plan(config(folders, folders[1], override), 2, cuda=False)


def test_a_teacher_that_is_no_hugging_face_folder_is_refused(folders, tmp_path):
    with pytest.raises(ConfigError, match=r"distill.teacher = .*is neither a Hugging Face model folder"):
        build_plan(config(folders, tmp_path), 1, cuda=False)


def test_an_imported_checkpoint_teacher_takes_its_architecture_from_its_hf_assets(folders, tmp_path):
    # the rule reads <checkpoint>/hf_assets/config.json (what convert_checkpoint.py import writes); the
    # weights loading from such a checkpoint is tests/functional/test_distill_parity.py's
    ckpt = tmp_path / "teacher_ckpt"
    (ckpt / "hf_assets").mkdir(parents=True)
    shutil.copy(folders[1] / "config.json", ckpt / "hf_assets" / "config.json")
    d = build_plan(config(folders, ckpt, "model.tensor_model_parallel_size=2"), 2, cuda=False).distill
    assert d.teacher.num_layers == 3 and d.teacher.tensor_model_parallel_size == 2
    assert (d.teacher_checkpoint, d.teacher_path) == (str(ckpt), str(ckpt / "hf_assets"))
