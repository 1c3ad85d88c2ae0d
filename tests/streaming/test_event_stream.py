"""``GET /v1/experiments/{id}/events`` over a real HTTP connection: history, live events, ``end``,
reconnecting with ``Last-Event-ID`` (also to another API process), the JSON pages, and 404s."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker
from stream_support import Run, Server, SseEvent, SseReader, db_events

from api.event_bus import BusConfig
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus
from core.experiments import service as experiments
from core.settings import Settings
from core.storage import FilesystemStore
from learners.admission.parse import parse_spec
from tests.auth_support import default_project_id
from workers.outcome import RunLimits
from workers.runs.job import run_experiment

S = ExperimentStatus
pytestmark = pytest.mark.integration
FAST = BusConfig(poll_interval_s=0.05, keepalive_s=15.0)


def _ids(events: list[SseEvent]) -> list[tuple[int, str]]:
    return [(e.id, e.event) for e in events if e.event != "end"]  # type: ignore[misc]


def test_a_stream_sends_the_history_then_live_events_then_end(
    serve: Callable[..., Server], start_run: Callable[[], Run], sessions: sessionmaker[Session]
) -> None:
    server = serve(FAST)
    run = start_run()
    reader = SseReader(f"{server.url}/v1/experiments/{run.id}/events", server.headers)
    try:
        first = reader.next()
        assert (first.event, first.data and first.data["to"]) == ("status", "queued")

        run.move(S.QUEUED, S.RUNNING, None)
        run.report()
        run.hooks.log("warning", "the critic's loss is large")
        run.hooks.flush()
        run.move(S.RUNNING, S.SUCCEEDED, None)
        received = [first, *reader.until_end()]
    finally:
        reader.close()

    assert _ids(received) == db_events(sessions, run.id)
    kinds = [e.event for e in received]
    assert kinds[:3] == ["status", "status", "metrics"] and kinds[-2:] == ["status", "end"]
    assert {"progress", "log"} <= set(kinds)
    metrics = received[2].data
    assert metrics is not None
    assert {p["name"] for p in metrics["points"]} == {"train/episode_return", "learner/loss"}
    log = next(e.data for e in received if e.event == "log")
    assert log == {
        "level": "warning",
        "message": "the critic's loss is large",
        "step": 100,
        "at": log["at"],
    }
    assert received[-1].data == {"status": "succeeded"}
    assert received[-1].id is None  # ``end`` has no id: every id names one stored event


def _write_run(run: Run, batches: int, every_s: float, checkpoint_at: int) -> threading.Thread:
    def work() -> None:
        run.move(S.QUEUED, S.RUNNING, None)
        for k in range(batches):
            run.report()
            if k == checkpoint_at:
                run.hooks.checkpoint(run.step, lambda path: path.write_bytes(b"weights"))
            time.sleep(every_s)
        run.move(S.RUNNING, S.SUCCEEDED, None)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_a_client_that_reconnects_with_last_event_id_gets_every_event_exactly_once(
    serve: Callable[..., Server], start_run: Callable[[], Run], sessions: sessionmaker[Session]
) -> None:
    first_server = serve(FAST)
    run = start_run()
    writer = _write_run(run, batches=40, every_s=0.05, checkpoint_at=25)
    received: list[SseEvent] = []

    reader = SseReader(f"{first_server.url}/v1/experiments/{run.id}/events", first_server.headers)
    while len(received) < 8:
        received.append(reader.next())
    reader.close()
    # The API process goes away while the run goes on; the client comes back to another one.
    first_server.stop()
    time.sleep(0.5)
    second_server = serve(FAST)
    reader = SseReader(
        f"{second_server.url}/v1/experiments/{run.id}/events",
        second_server.headers,
        last_event_id=received[-1].id,
    )
    try:
        received.extend(reader.until_end())
    finally:
        reader.close()
    writer.join(timeout=60)

    assert not writer.is_alive()
    ids = _ids(received)
    assert len(ids) == len(set(ids)), "an event arrived twice"
    assert ids == db_events(sessions, run.id), "the client missed an event or got them out of order"
    assert "checkpoint" in [kind for _, kind in ids]


def test_a_client_that_reconnects_after_the_end_gets_only_end(
    serve: Callable[..., Server], start_run: Callable[[], Run]
) -> None:
    server = serve(FAST)
    run = start_run()
    run.move(S.QUEUED, S.CANCELLED, "cancelled before it started")
    url = f"{server.url}/v1/experiments/{run.id}/events"
    whole = SseReader(url, server.headers)
    history = whole.until_end()
    whole.close()

    # The end has no id of its own: a client resumes from the last stored event's id.
    assert history[-1].event == "end" and history[-1].id is None
    ids = [e.id for e in history[:-1]]
    assert None not in ids and len(set(ids)) == len(ids)
    again = SseReader(url, server.headers, last_event_id=ids[-1])
    try:
        assert [e.event for e in again.until_end()] == ["end"]
    finally:
        again.close()
    assert [e.event for e in history] == ["status", "status", "end"]
    assert history[1].data and history[1].data["reason"] == "cancelled before it started"


def test_checkpoint_events_carry_their_download_urls(
    serve: Callable[..., Server], start_run: Callable[[], Run], storage: FilesystemStore
) -> None:
    server = serve(FAST)
    run = start_run()
    run.move(S.QUEUED, S.RUNNING, None)
    run.hooks.checkpoint(100, lambda path: path.write_bytes(b"the weights"))
    run.move(S.RUNNING, S.CANCELLING, "cancel requested")
    run.move(S.CANCELLING, S.CANCELLED, "cancelled at step 100")

    reader = SseReader(f"{server.url}/v1/experiments/{run.id}/events", server.headers)
    try:
        events = reader.until_end()
    finally:
        reader.close()
    checkpoint = next(e.data for e in events if e.event == "checkpoint")
    assert checkpoint is not None
    download = httpx.get(server.url + checkpoint["url"], headers=server.headers)
    assert download.status_code == 200 and download.content == b"the weights"
    assert checkpoint["replay_url"].endswith(f"/checkpoints/{checkpoint['id']}/replay.gif")
    assert events[-1].data == {"status": "cancelled"}


def test_an_idle_stream_sends_keep_alives(
    serve: Callable[..., Server], start_run: Callable[[], Run]
) -> None:
    server = serve(BusConfig(poll_interval_s=0.05, keepalive_s=0.2))
    run = start_run()
    reader = SseReader(f"{server.url}/v1/experiments/{run.id}/events", server.headers)
    try:
        reader.next()
        time.sleep(0.7)
        run.move(S.QUEUED, S.RUNNING, None)
        after_idle = reader.next()
    finally:
        reader.close()
    assert after_idle.data and after_idle.data["to"] == "running"
    assert reader.comments >= 2


def test_missing_and_malformed_experiments_are_404(serve: Callable[..., Server]) -> None:
    server = serve(FAST)
    for experiment_id in ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "not-an-id"):
        for params in ({}, {"format": "json"}):
            response = httpx.get(
                f"{server.url}/v1/experiments/{experiment_id}/events",
                params=params,
                headers=server.headers,
            )
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"


def test_bad_parameters_name_their_field(
    serve: Callable[..., Server], start_run: Callable[[], Run]
) -> None:
    server = serve(FAST)
    run = start_run()
    url = f"{server.url}/v1/experiments/{run.id}/events"
    cases = [
        ({"params": {"kinds": "status,gossip"}}, "kinds"),
        ({"params": {"after": "-3"}}, "after"),
        ({"params": {"format": "xml"}}, "format"),
        ({"headers": {"last-event-id": "yesterday"}}, "Last-Event-ID"),
    ]
    for request, field in cases:
        headers = {**server.headers, **request.get("headers", {})}
        params = request.get("params")
        response = httpx.get(url, params=params, headers=headers)
        assert response.status_code == 422, (request, response.text)
        assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_json_pages_hold_the_same_events_and_say_when_the_run_is_over(
    serve: Callable[..., Server], start_run: Callable[[], Run], sessions: sessionmaker[Session]
) -> None:
    server = serve(FAST)
    run = start_run()
    run.move(S.QUEUED, S.RUNNING, None)
    for _ in range(3):
        run.report()
    url = f"{server.url}/v1/experiments/{run.id}/events"

    auth = server.headers
    unfinished = httpx.get(
        url, params={"format": "json", "after": 0, "limit": 1000}, headers=auth
    ).json()
    run.move(S.RUNNING, S.FAILED, "the critic diverged")
    pages, after = [], unfinished["next_after"]
    while True:
        page = httpx.get(
            url, params={"format": "json", "after": after, "limit": 2}, headers=auth
        ).json()
        pages.append(page)
        after = page["next_after"]
        if page["finished"]:
            break
    only_status = httpx.get(url, params={"format": "json", "kinds": "status"}, headers=auth).json()

    assert unfinished["status"] == "running" and not unfinished["finished"]
    items = unfinished["items"] + [i for p in pages for i in p["items"]]
    assert [(i["id"], i["kind"]) for i in items] == db_events(sessions, run.id)
    assert pages[-1]["status"] == "failed"
    assert [i["data"]["to"] for i in only_status["items"]] == ["queued", "running", "failed"]
    assert only_status["items"][-1]["data"]["reason"] == "the critic diverged"


def test_a_failed_runs_stream_carries_its_error_then_ends(
    serve: Callable[..., Server],
    settings: Settings,
    sessions: sessionmaker[Session],
    storage: FilesystemStore,
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, so device=cuda would train")
    server = serve(FAST)
    with sessions() as session:
        experiment = experiments.submit(
            session,
            CeleryDispatcher(settings),
            parse_spec(tiny_spec(device="cuda")),
            default_project_id(session),
        )
    limits = RunLimits(poll_interval_s=0.1, time_limit_s=600)
    run_experiment(experiment.id, sessions, storage, limits)

    reader = SseReader(f"{server.url}/v1/experiments/{experiment.id}/events", server.headers)
    try:
        events = reader.until_end()
    finally:
        reader.close()
    errors = [e.data for e in events if e.event == "log" and e.data and e.data["level"] == "error"]
    assert len(errors) == 1 and "cuda" in errors[0]["message"].lower()
    assert events[-2].data and events[-2].data["to"] == "failed"
    assert events[-1].data == {"status": "failed"}
