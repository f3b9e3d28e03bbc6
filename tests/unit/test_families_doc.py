"""docs/families.md's family table is generated from the family folders, so it cannot drift from them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_family_table_is_generated_from_the_folders():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/dev/gen_families_doc.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_family_folder_has_its_table_entry():
    import importlib

    from bridge.models.families import families

    missing = [
        name
        for name in families()
        if not isinstance(getattr(importlib.import_module(f"bridge.models.{name}"), "TITLE", None), str)
        or not isinstance(getattr(importlib.import_module(f"bridge.models.{name}"), "REFUSED", None), str)
    ]
    assert missing == [], f"add TITLE and REFUSED to these family folders' __init__.py: {missing}"
