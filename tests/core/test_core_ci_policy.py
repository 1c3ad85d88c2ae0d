"""On CI a missing PostgreSQL or Redis fails the tests that need it; elsewhere they skip."""

from __future__ import annotations

import os
import subprocess

import pytest
from pytest_run import run_pytest

TARGET = "tests/core/test_core_migrations.py::test_migrations_match_the_models_on_postgresql"


def _run_without_postgres(ci: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update({"CI": ci, "MARLFORGE_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:1/x"})
    return run_pytest([TARGET, "-q", "-rs"], env=env)


@pytest.mark.parametrize(
    ("ci", "code", "words"),
    [
        ("true", 1, "must run, not skip"),
        ("", 0, "PostgreSQL is not reachable"),
    ],
)
def test_a_missing_database_fails_on_ci_and_skips_locally(ci: str, code: int, words: str) -> None:
    result = _run_without_postgres(ci)

    assert result.returncode == code, result.stdout
    assert words in result.stdout
