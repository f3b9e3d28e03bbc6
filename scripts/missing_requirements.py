"""Print the requirements of this project that the running interpreter lacks, one per line (for
`pip install -r`), torch never among them unless --with-torch; with --constraints FILE, write a pip
constraints file that pins the installed torch, so that installing the rest can never replace it.

    python scripts/missing_requirements.py --extra test --constraints constraints.txt > missing.txt

Used by scripts/gpu_check.sh when it runs in an image's own interpreter (GPU_CHECK_PYTHON): a CUDA build
of torch is already there, and only what is missing comes from a wheel folder or the index. Standard
library only (tomllib, importlib.metadata) plus `packaging`, or the copy pip carries."""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import sys
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare interpreter: pip's vendored copy
    from pip._vendor.packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
NEVER_UNLESS_ASKED = {"torch"}  # the image's CUDA build is the point of this mode


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def missing(
    requirements: Iterable[str],
    version_of: Callable[[str], str | None] = installed_version,
    with_torch: bool = False,
) -> list[str]:
    """The requirements (as written) that apply to this interpreter and are not installed at a version
    they accept. torch is left out unless `with_torch`, even when its version is not accepted."""
    out = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        if req.name.lower() in NEVER_UNLESS_ASKED and not with_torch:
            continue
        version = version_of(req.name)
        if version is None or not req.specifier.contains(version, prereleases=True):
            out.append(text)
    return out


def project_requirements(extras: Iterable[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--extra", action="append", default=[], help="an optional-dependency group (repeatable)"
    )
    parser.add_argument("--with-torch", action="store_true", help="list torch too when it is missing")
    parser.add_argument(
        "--constraints", type=Path, help="write a constraints file pinning the installed torch"
    )
    args = parser.parse_args(argv)
    for line in missing(project_requirements(args.extra), with_torch=args.with_torch):
        print(line)
    if args.constraints is not None:
        torch_version = installed_version("torch")
        args.constraints.write_text(f"torch=={torch_version}\n" if torch_version else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
