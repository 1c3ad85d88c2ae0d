"""The house's layering, checked with the tests so that CI fails when it breaks:

- the import contracts of ``[tool.importlinter]`` in pyproject.toml (``lint-imports``): the layers
  ``marlforge`` -> ``api`` | ``workers`` -> ``core`` -> ``learners``; the learners import no web,
  database or broker code; the service reaches the learners through ``learners.api`` alone; a
  deep-learning framework only inside its own backend package; the client imports no server code;
- no import circle anywhere in the service's packages, lazy (function-level) imports included;
- ``mypy`` (strict, as configured) on every package of the service.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["marlforge", "api", "core", "workers", "learners", "client"]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: the dev extra provides it (make install)")
    return found


def _run(*command: str, timeout_s: float) -> None:
    """Run one of the dev extra's checkers at the project root; it must exit 0."""
    result = subprocess.run(
        [_tool(command[0]), *command[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_import_contracts_hold() -> None:
    _run("lint-imports", "--no-cache", timeout_s=300)


def test_no_module_of_the_service_is_in_an_import_circle() -> None:
    import grimp

    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    circles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            # ``module`` is in a circle when what it imports leads back to it.
            if imported != module and graph.chain_exists(imported=module, importer=imported):
                circles.append(f"{module} -> {imported} -> ... -> {module}")
    assert circles == [], "\n".join(circles)


@pytest.mark.slow
def test_mypy_is_clean_on_every_package() -> None:
    _run("mypy", *PACKAGES, timeout_s=900)
