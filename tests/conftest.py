from __future__ import annotations

from pathlib import Path

import pytest


class TinyHFFolders:
    """Each family's tiny Hugging Face folder (tests/functional/workers/convert_models.py's save_hf_model:
    fp32, seed 0, with its tokenizer), saved once per session on first use and shared by every test
    that reads it; a test that changes a folder copies it first."""

    def __init__(self, root: Path):
        self.root = root
        self.models: dict[str, object] = {}

    def get(self, family: str) -> tuple[Path, object]:
        """(folder, HF model) of `family`."""
        if family not in self.models:
            from tests.functional.workers.convert_models import save_hf_model

            self.models[family] = save_hf_model(family, self.root / family)
        return self.root / family, self.models[family]

    def link(self, family: str, where: Path) -> object:
        """`where` becomes a link to `family`'s folder (for workers that read ROOT/hf/<family>); its model."""
        folder, model = self.get(family)
        where.parent.mkdir(parents=True, exist_ok=True)
        where.symlink_to(folder, target_is_directory=True)
        return model


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory) -> TinyHFFolders:
    return TinyHFFolders(tmp_path_factory.mktemp("tiny_hf"))


def pytest_configure(config):
    """Import Megatron-Core the way every bridge entry point does, before any test module imports it:
    bridge.parallel.megatron_import defers its `torch.compile`d kernels to CUDA tensors. Imported
    directly first, they would compile on CPU in this process (inductor's C++ for the CPU capability it
    picks, which fails to build under ATEN_CPU_CAPABILITY=default) while the runs under test run eagerly."""
    from bridge.parallel.megatron_import import import_megatron

    import_megatron()


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if has_cuda:
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not `in item.keywords`: that holds folder names too
            item.add_marker(skip_gpu)


def pytest_terminal_summary(terminalreporter):
    """The session's multi-rank launches, per launcher (torchrun itself, or ranks forked from the fork
    server of tests/functional/forkserver.py): how many, on how many rank processes, and their seconds in
    all (a rank that torchrun starts pays 5-10 s of imports before any test work)."""
    import sys

    launch = sys.modules.get("tests.functional.launch")
    if launch is None or not launch.LAUNCHES:
        return
    terminalreporter.write_sep("-", "multi-rank launches")
    if launch.forkserver_client.cache_info().currsize and not launch.forkserver_client().fork_safe:
        reason = launch.forkserver_client().unsafe_reason
        terminalreporter.write_line(f"fork server not used (every launch ran torchrun): {reason}")
    for launcher in ("forkserver", "torchrun"):
        launches = [one for one in launch.LAUNCHES if one.launcher == launcher]
        if launches:
            ranks = sum(one.nproc for one in launches)
            seconds = sum(one.seconds for one in launches)
            terminalreporter.write_line(
                f"{launcher}: {len(launches)} launches, {ranks} rank processes, {seconds:.0f} s in all"
            )
