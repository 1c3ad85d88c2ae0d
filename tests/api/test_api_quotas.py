"""Per-project quotas at submission: runs queued or running, and submissions per minute. Over
either is a 429 with the reason (and ``Retry-After`` for the rate); another project is unaffected,
and nothing is stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.auth_support import bearer, experiment_count

pytestmark = pytest.mark.integration


@pytest.fixture
def limited(member_client_with: Callable[..., TestClient]) -> TestClient:
    """A member client of team-a on an app whose projects may have 2 active runs and submit 3 a
    minute."""
    return member_client_with(project_max_active_runs=2, project_submissions_per_minute=3)


def _count(session: Session) -> int:
    return experiment_count(session, "team-a")


def test_active_runs_are_capped_per_project(
    limited: TestClient, keys: dict[str, str], example_spec: dict[str, Any], session: Session
) -> None:
    first = limited.post("/v1/experiments", json=example_spec).json()
    limited.post("/v1/experiments", json=example_spec)

    over = limited.post("/v1/experiments", json=example_spec)

    assert over.status_code == 429
    assert over.json()["error"]["code"] == "quota_exceeded"
    assert "2 runs queued or running" in over.json()["error"]["message"]
    assert "MARLFORGE_PROJECT_MAX_ACTIVE_RUNS" in over.json()["error"]["message"]
    assert _count(session) == 2
    # Another project has its own quota; a cancelled run frees a slot.
    other = limited.post("/v1/experiments", json=example_spec, headers=bearer(keys["other"]))
    assert other.status_code == 201
    limited.post(f"/v1/experiments/{first['id']}/cancel")
    assert limited.post("/v1/experiments", json=example_spec).status_code == 201


def test_submissions_per_minute_are_capped_with_retry_after(
    limited: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    for _ in range(3):
        created = limited.post("/v1/experiments", json=example_spec).json()
        limited.post(f"/v1/experiments/{created['id']}/cancel")  # stay under the active cap

    over = limited.post("/v1/experiments", json=example_spec)

    assert over.status_code == 429
    assert "3 experiments or sweeps in the last 60 s" in over.json()["error"]["message"]
    assert 1 <= int(over.headers["retry-after"]) <= 60
    assert _count(session) == 3
