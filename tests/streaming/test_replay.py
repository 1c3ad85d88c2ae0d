"""``.../checkpoints/{id}/replay.gif``: a real run's checkpoint rendered by the ``learners.replay``
subprocess, cached in the artifact storage, and a missing checkpoint is a 404."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from core.dispatch.queue import CeleryDispatcher
from core.experiments import service as experiments
from core.settings import Settings
from core.storage import FilesystemStore
from learners.admission.parse import parse_spec
from tests.auth_support import bearer, default_project_id, new_key
from workers.outcome import Outcome, RunLimits
from workers.runs.job import run_experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def client(
    settings: Settings, sessions: sessionmaker[Session], storage: FilesystemStore
) -> Iterator[TestClient]:
    """The API on the module's database."""
    with TestClient(create_app(settings, session_factory=sessions, storage=storage)) as c:
        c.headers.update(bearer(new_key(sessions, settings)))
        yield c


def test_a_checkpoint_replays_as_an_animated_gif_rendered_once(
    client: TestClient,
    settings: Settings,
    sessions: sessionmaker[Session],
    storage: FilesystemStore,
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    with sessions() as session:
        experiment = experiments.submit(
            session,
            CeleryDispatcher(settings),
            parse_spec(tiny_spec(total_steps=200)),
            default_project_id(session),
        )
    limits = RunLimits(poll_interval_s=0.5, time_limit_s=600)
    assert run_experiment(experiment.id, sessions, storage, limits) == Outcome.DONE
    checkpoint = client.get(f"/v1/experiments/{experiment.id}/checkpoints").json()["items"][-1]
    url = f"/v1/experiments/{experiment.id}/checkpoints/{checkpoint['id']}/replay.gif"

    first = client.get(url)
    cached = list(storage.root.glob(f"experiments/{experiment.id}/replays/*.gif"))
    again = client.get(url)

    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "image/gif"
    gif = Image.open(io.BytesIO(first.content))
    assert gif.format == "GIF" and gif.n_frames > 1
    assert [p.name for p in cached] == [f"{checkpoint['id']}-{checkpoint['sha256'][:16]}.gif"]
    assert again.content == first.content


def test_a_missing_checkpoint_has_no_replay(
    client: TestClient, start_run: Callable[..., Any]
) -> None:
    run = start_run()
    response = client.get(
        f"/v1/experiments/{run.id}/checkpoints/01ARZ3NDEKTSV4RRFFQ69G5FAV/replay.gif"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
