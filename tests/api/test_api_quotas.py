"""Per-project quotas at submission: runs queued or running, matches queued or playing,
submissions per minute (experiments, sweeps, matches and resumes) and checkpoint storage. Over
any is a 429 with the reason (and ``Retry-After`` for the rate); another project is unaffected,
and nothing is stored or changed."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.quotas import kept_checkpoint_mib
from core.settings import Settings
from core.storage import FilesystemStore
from learners.admission.parse import parse_spec
from tests.api.checkpoint_support import store_checkpoint
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
    assert (
        "3 experiments, sweeps, matches or resumes in the last 60 s"
        in (over.json()["error"]["message"])
    )
    assert 1 <= int(over.headers["retry-after"]) <= 60
    assert _count(session) == 3


def test_resumes_count_as_active_runs_and_as_submissions(
    member_client_with: Callable[..., TestClient], example_spec: dict[str, Any]
) -> None:
    client = member_client_with(project_max_active_runs=2, project_submissions_per_minute=5)
    first, second = (client.post("/v1/experiments", json=example_spec).json() for _ in range(2))
    client.post(f"/v1/experiments/{first['id']}/cancel")
    third = client.post("/v1/experiments", json=example_spec).json()  # 2 active again

    over = client.post(f"/v1/experiments/{first['id']}/resume")

    assert over.status_code == 429, over.text
    assert "2 runs queued or running" in over.json()["error"]["message"]
    assert client.get(f"/v1/experiments/{first['id']}").json()["status"] == "cancelled"
    # With a slot free it resumes, and that resume counts against the rate: 3 submissions and 1
    # resume so far, then 1 more resume fills the 5 of the minute.
    client.post(f"/v1/experiments/{second['id']}/cancel")
    assert client.post(f"/v1/experiments/{first['id']}/resume").status_code == 200
    client.post(f"/v1/experiments/{first['id']}/cancel")
    assert client.post(f"/v1/experiments/{second['id']}/resume").status_code == 200
    client.post(f"/v1/experiments/{third['id']}/cancel")
    rated = client.post(f"/v1/experiments/{third['id']}/resume")
    assert rated.status_code == 429, rated.text
    assert "in the last 60 s" in rated.json()["error"]["message"]
    assert client.get(f"/v1/experiments/{third['id']}").json()["status"] == "cancelled"
    # A run that cannot be resumed is still the 409 it was, not a 429.
    assert client.post(f"/v1/experiments/{second['id']}/resume").status_code == 409


MATCH = {"env": {"id": "simple_tag_v3"}, "teams": {"adversary": "random", "agent": "random"}}


def test_matches_are_capped_per_project_and_count_against_the_rate(
    member_client_with: Callable[..., TestClient],
    keys: dict[str, str],
    example_spec: dict[str, Any],
) -> None:
    client = member_client_with(project_max_active_matches=2, project_submissions_per_minute=4)
    first, _ = (client.post("/v1/matches", json=MATCH).json() for _ in range(2))

    over = client.post("/v1/matches", json=MATCH)

    assert over.status_code == 429, over.text
    message = over.json()["error"]["message"]
    assert "2 matches queued or playing" in message
    assert "MARLFORGE_PROJECT_MAX_ACTIVE_MATCHES" in message
    assert len(client.get("/v1/matches").json()["items"]) == 2
    other = client.post("/v1/matches", json=MATCH, headers=bearer(keys["other"]))
    assert other.status_code == 201
    # A cancelled match frees its slot; the matches count as submissions: 3 of 4 after this one.
    assert client.post(f"/v1/matches/{first['id']}/cancel").status_code == 200
    assert client.post("/v1/matches", json=MATCH).status_code == 201
    assert client.post("/v1/experiments", json=example_spec).status_code == 201
    rated = client.post("/v1/experiments", json=example_spec)
    assert rated.status_code == 429 and "in the last 60 s" in rated.json()["error"]["message"]


def test_a_match_is_cancelled_once_and_an_ended_one_is_409(
    client: TestClient, session: Session
) -> None:
    created = client.post("/v1/matches", json=MATCH).json()

    cancelled = client.post(f"/v1/matches/{created['id']}/cancel")

    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["status"] == "cancelled"
    assert body["status_reason"].startswith("cancelled by key 'member'")
    again = client.post(f"/v1/matches/{created['id']}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["error"]["message"]
    assert client.post("/v1/matches/01JAAAAAAAAAAAAAAAAAAAAAAA/cancel").status_code == 404


def test_a_match_over_the_agent_step_limit_is_a_422_naming_episodes_and_stores_nothing(
    member_client_with: Callable[..., TestClient], client: TestClient
) -> None:
    # simple_tag_v3 as it comes: 4 agents for 25 cycles, 100 agent steps an episode.
    limited = member_client_with(match_max_agent_steps=10_000)
    before = len(limited.get("/v1/matches").json()["items"])

    over = limited.post("/v1/matches", json={**MATCH, "episodes": 101})
    longer = limited.post(
        "/v1/matches", json={**MATCH, "env": {"id": "simple_tag_v3", "kwargs": {"max_cycles": 50}}}
    )

    assert over.status_code == 422, over.text
    (field,) = over.json()["error"]["fields"]
    assert field["field"] == "episodes"
    assert "10,100 agent steps (101 episodes of 100)" in field["reason"]
    assert "MARLFORGE_MATCH_MAX_AGENT_STEPS" in field["reason"]
    assert "at most 100 episodes" in field["reason"]
    # The episodes' length counts too: 100 episodes of 50 cycles are 20,000.
    assert longer.status_code == 422 and "at most 50 episodes" in longer.text
    assert len(limited.get("/v1/matches").json()["items"]) == before
    assert limited.post("/v1/matches", json={**MATCH, "episodes": 100}).status_code == 201
    # The default limit takes 1,000 episodes of the scenario as it comes.
    assert client.post("/v1/matches", json={**MATCH, "episodes": 1000}).status_code == 201


def test_a_spec_writing_or_keeping_too_many_checkpoints_is_a_422_naming_the_field(
    member_client_with: Callable[..., TestClient], example_spec: dict[str, Any], session: Session
) -> None:
    # The example's DDPG checkpoint holds its networks and its replay buffer.
    limited = member_client_with(run_max_checkpoints=100, run_max_checkpoint_mb=200)
    before = _count(session)
    hoarding = {**example_spec, "checkpoint": {"every_steps": 1, "keep_last": 1000}}

    refused = limited.post("/v1/experiments", json=hoarding)

    assert refused.status_code == 422, refused.text
    fields = {f["field"]: f["reason"] for f in refused.json()["error"]["fields"]}
    assert set(fields) == {"checkpoint.every_steps", "checkpoint.keep_last"}
    writes = fields["checkpoint.every_steps"]
    assert "6,000 checkpoints (total_steps 6,000 / every_steps 1)" in writes
    assert "MARLFORGE_RUN_MAX_CHECKPOINTS" in writes and "save every 60 steps or more" in writes
    kept = fields["checkpoint.keep_last"]
    assert "would keep 1,001 checkpoints" in kept and "MARLFORGE_RUN_MAX_CHECKPOINT_MB" in kept
    assert _count(session) == before
    # What the reason suggests is accepted: every 60 steps, keeping as many as fit.
    fit = int(kept.rsplit("keep at most ", 1)[1].replace(",", ""))
    suggested = {**example_spec, "checkpoint": {"every_steps": 60, "keep_last": fit}}
    accepted = limited.post("/v1/experiments", json=suggested)
    assert accepted.status_code == 201, accepted.text
    assert limited.post("/v1/experiments", json=example_spec).status_code == 201


def test_the_projects_checkpoint_storage_is_capped_at_submission(
    member_client_with: Callable[..., TestClient],
    keys: dict[str, str],
    example_spec: dict[str, Any],
    session: Session,
    storage: FilesystemStore,
    settings: Settings,
) -> None:
    """A run's estimated kept checkpoints and the project's stored ones, against
    MARLFORGE_PROJECT_MAX_ARTIFACT_MB; the worker holds each run to it again as it writes
    (tests/workers/test_worker_runs.py)."""
    estimate = kept_checkpoint_mib(parse_spec(example_spec), settings)
    limit = math.ceil(estimate) + 2
    client = member_client_with(project_max_artifact_mb=limit)
    created = client.post("/v1/experiments", json=example_spec)
    assert created.status_code == 201, created.text
    run = created.json()["id"]
    client.post(f"/v1/experiments/{run}/cancel")
    store_checkpoint(session, storage, run, 1000, b"\0" * (3 * 2**20))  # 3 MiB stored

    over = client.post("/v1/experiments", json=example_spec)

    assert over.status_code == 429, over.text
    message = over.json()["error"]["message"]
    assert message.startswith("the project keeps 3 MiB of checkpoints and this would keep about")
    assert f"MARLFORGE_PROJECT_MAX_ARTIFACT_MB={limit:,} MiB" in message
    assert _count(session) == 1
    # A resume adds what the run may keep beyond what it stores already.
    assert client.post(f"/v1/experiments/{run}/resume").status_code == 200
    client.post(f"/v1/experiments/{run}/cancel")
    store_checkpoint(session, storage, run, 2000, b"\0" * (limit * 2**20))
    resumed = client.post(f"/v1/experiments/{run}/resume")
    assert resumed.status_code == 429, resumed.text
    assert client.get(f"/v1/experiments/{run}").json()["status"] == "cancelled"
    other = client.post("/v1/experiments", json=example_spec, headers=bearer(keys["other"]))
    assert other.status_code == 201, "another project's storage is its own"
