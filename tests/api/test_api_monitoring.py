"""``GET /metrics``: the service's state in Prometheus's text format, parsed with the client
library's own parser, after real submissions, status changes and takeovers of lost workers.

The session's database may hold runs that other tests committed, so counts are compared with a
scrape taken at the start of the test; the broker folder is the test's own."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from core.db import make_engine, make_session_factory, utcnow
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus, FailureClass
from core.leases import service as leases
from core.lifecycle import transition
from core.settings import Settings
from core.storage import FilesystemStore

pytestmark = pytest.mark.integration

S = ExperimentStatus
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

# The reasons the service writes when a run fails (workers.runs, core.experiments.service), and
# the class each must count under.
FAILURES = [
    (
        "stopped at step 12: the run used 5,120 MiB, above its memory budget of 4,096 MiB "
        "(MARLFORGE_RUN_MEMORY_MB)",
        FailureClass.OVER_MEMORY,
    ),
    ("stopped at step 40: the run exceeded the time limit of 60 s", FailureClass.TIME_LIMIT),
    (
        "the run's process failed at step 8: non-finite loss at step 8: learner/loss_critic = nan",
        FailureClass.NONFINITE_LOSS,
    ),
    (
        "the run's process died at step 30 (killed by SIGKILL) before it recorded an end",
        FailureClass.PROCESS_DIED,
    ),
    (
        "could not queue the run: the broker is unreachable (Error 111 connecting)",
        FailureClass.BROKER_UNREACHABLE,
    ),
    ("the run's process failed at step 3: boom", FailureClass.ERROR),
    ("the stored spec is no longer valid: 1 validation error", FailureClass.ERROR),
]


def scrape(client: TestClient) -> Samples:
    """Every sample of ``GET /metrics``, by name and labels."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def grown(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much a sample grew between two scrapes."""
    return value(after, name, **labels) - value(before, name, **labels)


def _submit(client: TestClient, spec: dict[str, Any], **changes: Any) -> str:
    response = client.post("/v1/experiments", json={**spec, **changes})
    assert response.status_code == 201, response.text
    experiment_id: str = response.json()["id"]
    return experiment_id


def _start(session: Session, experiment_id: str, worker: str) -> None:
    assert transition(
        session, experiment_id, [S.QUEUED], S.RUNNING, f"started on worker {worker}",
        **leases.hold(worker, ttl_s=60),
    )  # fmt: skip
    session.commit()


def test_runs_by_status_and_backend_and_queue_depths(
    client: TestClient, session: Session, example_spec: dict[str, Any]
) -> None:
    before = scrape(client)
    ids = [_submit(client, example_spec) for _ in range(3)]
    tensorflow = _submit(client, example_spec, backend="tensorflow")
    _start(session, ids[0], "w-metrics")
    transition(session, ids[1], [S.QUEUED], S.CANCELLED, "cancelled before it started")
    session.commit()

    after = scrape(client)

    runs = "marlforge_runs"
    assert grown(before, after, runs, status="queued", backend="torch") == 1
    assert grown(before, after, runs, status="running", backend="torch") == 1
    assert grown(before, after, runs, status="cancelled", backend="torch") == 1
    assert grown(before, after, runs, status="queued", backend="tensorflow") == 1
    assert grown(before, after, runs, status="failed", backend="mindspore") == 0
    queued = "marlforge_queued_runs"
    assert grown(before, after, queued, backend="torch", queue="apitest.torch") == 1
    assert grown(before, after, queued, backend="tensorflow", queue="apitest.tensorflow") == 1
    # The broker's own count: every submission left a message in the test's broker folder.
    broker = "marlforge_broker_queue_messages"
    assert value(after, broker, backend="torch", queue="apitest.torch") == 3
    assert value(after, broker, backend="tensorflow", queue="apitest.tensorflow") == 1
    assert value(after, broker, backend="mindspore", queue="apitest.mindspore") == 0
    assert value(after, "marlforge_source_up", source="database") == 1
    assert value(after, "marlforge_source_up", source="broker") == 1
    assert tensorflow not in client.get("/metrics").text


def test_takeovers_restarts_and_lost_workers_that_failed_their_runs(
    client: TestClient,
    session: Session,
    session_factory: sessionmaker[Session],
    settings: Settings,
    example_spec: dict[str, Any],
) -> None:
    before = scrape(client)
    restarted = _submit(client, example_spec)
    not_restarted = _submit(client, example_spec, max_restarts=0)
    for experiment_id in (restarted, not_restarted):
        _start(session, experiment_id, "w-lost")

    # The reaper of a later moment finds both leases lapsed (and any lapsed run other tests left).
    later = utcnow() + dt.timedelta(seconds=120)
    done = leases.reap(session_factory, CeleryDispatcher(settings), ttl_s=60, now=later)
    after = scrape(client)

    outcomes = {t.experiment_id: t.to for t in done}
    assert outcomes[restarted] == S.QUEUED and outcomes[not_restarted] == S.FAILED
    requeued = sum(t.to == S.QUEUED for t in done)
    failed = sum(t.to == S.FAILED for t in done)
    assert grown(before, after, "marlforge_takeovers_total") == len(done)
    assert grown(before, after, "marlforge_restarts_total") == requeued
    lost = FailureClass.LOST_WORKER.value
    assert grown(before, after, "marlforge_failed_runs", reason=lost) == failed


def test_failed_runs_are_counted_by_the_class_of_their_reason(
    client: TestClient, session: Session, example_spec: dict[str, Any]
) -> None:
    before = scrape(client)
    for reason, _ in FAILURES:
        experiment_id = _submit(client, example_spec)
        transition(session, experiment_id, [S.QUEUED], S.FAILED, reason)
    session.commit()

    after = scrape(client)

    expected = {kind: sum(k == kind for _, k in FAILURES) for kind in FailureClass}
    assert {
        kind: grown(before, after, "marlforge_failed_runs", reason=kind.value)
        for kind in FailureClass
    } == expected


def test_request_latency_is_labelled_by_route_template_never_by_raw_path(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    ids = [_submit(client, example_spec) for _ in range(2)]
    for experiment_id in ids:
        assert client.get(f"/v1/experiments/{experiment_id}").status_code == 200
    assert client.get("/v1/nowhere/at/all").status_code == 404
    client.request("BREW", "/healthz")

    response = client.get("/metrics")
    samples = scrape(client)

    count = "marlforge_http_request_duration_seconds_count"
    route = "/v1/experiments/{experiment_id}"
    assert value(samples, count, route=route, method="GET", status="200") == 2
    assert value(samples, count, route="/v1/experiments", method="POST", status="201") == 2
    assert value(samples, count, route="unmatched", method="GET", status="404") == 1
    assert value(samples, count, route="/healthz", method="other", status="405") == 1
    assert value(samples, count, route="/metrics", method="GET", status="200") >= 1
    bucket = "marlforge_http_request_duration_seconds_bucket"
    labels = {"route": route, "method": "GET", "status": "200", "le": "+Inf"}
    assert value(samples, bucket, **labels) == 2
    assert all(i not in response.text for i in ids)
    assert "nowhere" not in response.text


def test_metrics_need_no_key_and_are_described(anonymous: TestClient) -> None:
    assert anonymous.get("/metrics").status_code == 200
    operation = anonymous.get("/openapi.json").json()["paths"]["/metrics"]["get"]
    assert "no label names a project" in operation["description"]
    assert "security" not in operation


@pytest.fixture
def unreachable(settings: Settings, storage: FilesystemStore) -> Iterator[TestClient]:
    """An app whose database and Redis broker both refuse connections."""
    engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2")
    app = create_app(
        settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}),
        session_factory=make_session_factory(engine),
        storage=storage,
    )
    with TestClient(app) as client:
        yield client
    engine.dispose()


def test_a_scrape_says_which_source_it_could_not_read(unreachable: TestClient) -> None:
    samples = scrape(unreachable)

    assert value(samples, "marlforge_source_up", source="database") == 0
    assert value(samples, "marlforge_source_up", source="broker") == 0
    assert not any(name.startswith(("marlforge_runs", "marlforge_broker")) for name, _ in samples)


def test_the_redis_broker_reports_its_queue_lengths(
    settings: Settings,
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    redis_url: str,
    queue_prefix: str,
) -> None:
    import redis

    from learners.enums import Backend, Device

    prefix = f"{queue_prefix}metrics."
    on_redis = settings.model_copy(update={"broker_url": redis_url, "queue_prefix": prefix})
    dispatcher = CeleryDispatcher(on_redis)
    # A family's count is over every suite's queue.
    for backend, device, suite in (
        (Backend.TORCH, Device.AUTO, "mpe"),
        (Backend.TORCH, Device.CPU, "lbf"),
        (Backend.TORCH, Device.CUDA, "gymnasium"),
        (Backend.MINDSPORE, Device.AUTO, "mpe"),
    ):
        dispatcher.enqueue("01JAAAAAAAAAAAAAAAAAAAAAAA", backend, device, suite)
    app = create_app(on_redis, session_factory=session_factory, storage=storage)
    try:
        with TestClient(app) as client:
            samples = scrape(client)
    finally:
        connection = redis.Redis.from_url(redis_url)
        for key in connection.scan_iter(match=f"*{prefix}*"):
            connection.delete(key)
        connection.close()

    broker = "marlforge_broker_queue_messages"
    assert value(samples, broker, backend="torch", queue=f"{prefix}torch") == 2
    assert value(samples, broker, backend="torch", queue=f"{prefix}torch-gpu") == 1
    assert value(samples, broker, backend="mindspore", queue=f"{prefix}mindspore") == 1
    assert value(samples, broker, backend="tensorflow", queue=f"{prefix}tensorflow") == 0
    assert value(samples, broker, backend="tensorflow", queue=f"{prefix}tensorflow-gpu") == 0
    # MindSpore runs on the CPU only: it has no GPU queue.
    assert not any(("queue", f"{prefix}mindspore-gpu") in labels for _, labels in samples)
    assert value(samples, "marlforge_source_up", source="broker") == 1
