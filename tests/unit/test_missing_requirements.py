"""scripts/missing_requirements.py: what scripts/gpu_check.sh installs into an image's own interpreter."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from tests.functional.launch import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "missing_requirements", REPO_ROOT / "scripts/missing_requirements.py"
)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
missing = _module.missing

INSTALLED = {"torch": "2.11.0+cu130", "numpy": "2.1.0", "megatron-core": "0.19.2", "peft": "0.12.0"}


def test_missing_lists_absent_and_unaccepted_versions_and_never_torch():
    reqs = [
        "torch>=2.13",  # the image's torch is older than asked: still never reinstalled
        "numpy",
        "peft>=0.13",  # installed, but too old
        "psutil",  # absent
        f"megatron-core>=0.19.2,<0.20; python_version >= '{sys.version_info.major}.{sys.version_info.minor}'",
        "triton>=3.0; python_version < '3.0'",  # not for this interpreter
    ]
    assert missing(reqs, INSTALLED.get) == ["peft>=0.13", "psutil"]
    assert missing(reqs, INSTALLED.get, with_torch=True) == ["torch>=2.13", "peft>=0.13", "psutil"]


def test_this_interpreter_has_the_test_requirements(tmp_path):
    # the development venvs hold every requirement of the project and its test extra: nothing to install,
    # and the constraints pin the torch that is there
    proc = subprocess.run(
        [sys.executable, "scripts/missing_requirements.py", "--extra", "test", "--constraints", str(tmp_path / "c")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr
    import importlib.metadata

    assert (tmp_path / "c").read_text() == f"torch=={importlib.metadata.version('torch')}\n"
