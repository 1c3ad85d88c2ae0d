"""Print what the image's dependency layer installs, one requirement a line: the build system's
requirements (the project itself is installed later, with ``--no-build-isolation``), the project's
dependencies and those of each extra named (comma-separated).

    python requirements.py pyproject.toml torch,tensorflow > requirements.txt

The Dockerfile copies only ``pyproject.toml`` and this script before installing these, so a change
to the sources reuses the cached layer instead of reinstalling PyTorch, TensorFlow or MindSpore.
An extra that ``pyproject.toml`` does not define fails the build (``pip install '.[typo]'`` would
only warn and install no framework).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any


def requirements(pyproject: dict[str, Any], extras: str) -> list[str]:
    """The build requirements, the dependencies and those of ``extras`` (``torch,dev``...)."""
    project = pyproject["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    names = [name.strip() for name in extras.split(",") if name.strip()]
    unknown = sorted(set(names) - set(optional))
    if unknown:
        raise SystemExit(f"unknown extras {unknown}: pyproject.toml defines {sorted(optional)}")
    extra_requirements = [r for name in names for r in optional[name]]
    return [*pyproject["build-system"]["requires"], *project["dependencies"], *extra_requirements]


def main(argv: list[str]) -> None:
    pyproject = tomllib.loads(Path(argv[0]).read_text())
    print("\n".join(requirements(pyproject, argv[1] if len(argv) > 1 else "")))


if __name__ == "__main__":
    main(sys.argv[1:])
