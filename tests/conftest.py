import pytest


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
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def pytest_terminal_summary(terminalreporter):
    """The session's torchrun launches: how many, on how many rank processes, and their seconds in all
    (each rank pays 7-10 s of imports before any test work, so the count is what the functional time
    follows)."""
    import sys

    launch = sys.modules.get("tests.functional.launch")
    if launch is None or not launch.LAUNCHES:
        return
    launches = launch.LAUNCHES
    ranks = sum(one.nproc for one in launches)
    seconds = sum(one.seconds for one in launches)
    terminalreporter.write_sep("-", "torchrun launches")
    terminalreporter.write_line(f"{len(launches)} launches, {ranks} rank processes, {seconds:.0f} s in all")
