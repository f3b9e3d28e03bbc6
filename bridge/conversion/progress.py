"""One progress bar for conversion work: tqdm on an interactive terminal, nothing in logs or when off."""

from __future__ import annotations


def progress_bar(total: int, desc: str, unit: str, enabled: bool = True):
    from tqdm import tqdm

    # disable=None: tqdm turns itself off when stderr is not a terminal, so logs stay clean.
    return tqdm(total=total, desc=desc, unit=unit, leave=False, disable=None if enabled else True)
