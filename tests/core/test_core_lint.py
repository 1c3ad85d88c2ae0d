"""The code style the project holds itself to (ruff's rules in pyproject.toml) is checked with the
tests, so CI fails on a lint error as it does on a failing test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "marlforge",
    "api",
    "core",
    "workers",
    "learners",
    "client",
    "tests",
    "benchmarks",
    "scripts",
]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: the dev extra provides it (make install)")
    return subprocess.run(
        [ruff, *args, *PACKAGES], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_ruff_check_is_clean() -> None:
    result = _ruff("check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_every_file_as_it_is() -> None:
    result = _ruff("format", "--check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
