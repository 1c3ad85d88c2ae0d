"""A run's events, live (Server-Sent Events) or as pages (JSON), and its status timeline.

Every event is a row of ``experiment_events`` and its SSE ``id`` is that row's id, so a client that
reconnects with ``Last-Event-ID`` (browsers do it by themselves) gets exactly the events it missed,
from whichever API process it reaches, also after a restart.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import Depends, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from api.auth import ExperimentId, project_router, still_authorized
from api.deps import ServicesDep, SessionDep
from api.errors import ApiError, FieldProblem, error_responses
from api.event_bus import EventBus, Page, get_event_bus
from api.schemas.events import EventOut, EventPage, Timeline, TransitionOut
from core.enums import EventKind, ExperimentStatus
from core.experiments import service
from core.experiments.event_stream import StoredEvent, StreamHead
from core.experiments.events import EventRepository
from core.ids import MAX_INT64

router = project_router("/v1/experiments", ["events"])

# Browsers wait this long before reconnecting a dropped stream.
RETRY_MS = 2000
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

BusDep = Annotated[EventBus, Depends(get_event_bus)]
_KIND = "(" + "|".join(k.value for k in EventKind) + ")"
KINDS_PATTERN = f"^{_KIND}(,{_KIND})*$"
_EVENT_ID = re.compile("[0-9]{1,18}")


def event_data(event: StoredEvent) -> dict[str, Any]:
    """What a client receives for ``event``: its payload, plus download links for checkpoints."""
    data = dict(event.payload)
    if event.kind == EventKind.CHECKPOINT:
        base = f"/v1/experiments/{event.experiment_id}/checkpoints/{data['id']}"
        data["url"] = f"{base}/file"
        data["replay_url"] = f"{base}/replay.gif"
    return data


def _sse(event_id: int | None, kind: str, data: dict[str, Any]) -> str:
    # An event without an id leaves the client's last event id as it was (the SSE standard).
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _frame(event: StoredEvent) -> str:
    return _sse(event.id, event.kind, {**event_data(event), "at": event.created_at.isoformat()})


def _parse_kinds(kinds: str | None) -> set[EventKind]:
    if kinds is None:
        return set()
    wanted = set(kinds.split(","))
    unknown = sorted(wanted - set(EventKind))
    if unknown:
        shown = ", ".join(repr(k) for k in unknown)
        reason = f"unknown kind(s) {shown}; kinds are {', '.join(EventKind)}, comma-separated"
        raise ApiError(
            422, "invalid_request", f"kinds: {reason}", [FieldProblem(field="kinds", reason=reason)]
        )
    return {EventKind(k) for k in wanted}


def _cursor(last_event_id: str | None, after: int | None) -> int:
    # A reconnecting browser sends Last-Event-ID while its URL still holds the first ``after``.
    if last_event_id is None or not last_event_id.strip():
        return after or 0
    if not _EVENT_ID.fullmatch(last_event_id.strip()):
        reason = "must be an event id (a non-negative integer of at most 18 digits)"
        raise ApiError(
            422,
            "invalid_request",
            f"Last-Event-ID: {reason}",
            [FieldProblem(field="Last-Event-ID", reason=reason)],
        )
    return int(last_event_id)


REVOKED = {
    "code": "unauthenticated",
    "message": "the API key or session this stream was opened with was revoked, signed out or "
    "expired; the stream ends",
}


async def _stream(
    bus: EventBus,
    experiment_id: str,
    cursor: int,
    kinds: set[EventKind],
    still_authorized: Callable[[], bool],
) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    config = bus.config
    checked = quiet_since = time.monotonic()
    async with bus.subscribe(experiment_id) as subscription:
        while True:
            page: Page = await subscription.next_page(cursor, kinds)
            if page.events:
                yield "".join(_frame(e) for e in page.events)
            cursor = page.cursor
            if page.more:
                continue
            if page.finished:
                # No id of its own: every id names one stored event, and a client that
                # de-duplicates by id must not drop the end as a repeat of the last one.
                yield _sse(None, "end", {"status": page.status})
                return
            news = await subscription.wait(min(config.keepalive_s, config.recheck_s))
            now = time.monotonic()
            if now - checked >= config.recheck_s:
                checked = now
                if not await to_thread.run_sync(still_authorized):
                    # No id: a client that reconnects is answered 401 and stops.
                    yield _sse(None, "error", REVOKED)
                    return
            if news or page.events:
                quiet_since = now
            elif now - quiet_since >= config.keepalive_s:
                quiet_since = now
                yield ": keep-alive\n\n"


@router.get(
    "/{experiment_id}/events",
    summary="Stream a run's events",
    description="Server-Sent Events: `status` (every transition, with its reason), `progress`, "
    "`metrics` (batches of points), `checkpoint` (with its download `url` and `replay_url`), "
    "`log` (worker messages, warnings, the error of a failed run) and a final `end` once the run "
    "is over, after which the server closes the stream; `error` (`unauthenticated`) and a close "
    "within 5 s once the key or session the stream was opened with is revoked, signed out or "
    "expired. Every event but `end` and `error` has a unique, "
    "monotonic `id` (`end` has none, so reconnecting after it replays nothing twice): "
    "reconnect with `Last-Event-ID` (or `?after=`) to receive exactly the events after it. "
    "Without either, the run's whole history comes first. A comment line is sent every 15 s "
    "while nothing happens. `?format=json` returns the same events as a page instead "
    "(`after`, `limit`), for polling clients; `kinds` keeps only some kinds. A run compacted "
    "after the deployment's retention (its `compacted_at` is set) replays only its `status`, "
    "`checkpoint` and `log` events; its metric series stay readable from `GET /v1/metrics`.",
    responses={
        200: {
            "model": EventPage,
            "content": {"text/event-stream": {}},
            "description": "The stream, or a page of events with `format=json`.",
        },
        **error_responses(404, 422),
    },
)
async def read_events(
    request: Request,
    experiment_id: ExperimentId,
    bus: BusDep,
    services: ServicesDep,
    format: Annotated[Literal["sse", "json"], Query(description="`sse` or `json`.")] = "sse",
    after: Annotated[
        int | None, Query(ge=0, le=MAX_INT64, description="Only events after this id.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=5000, description="`format=json`: page size.")] = 500,
    kinds: Annotated[
        str | None,
        Query(
            json_schema_extra={"pattern": KINDS_PATTERN},
            description="Comma-separated kinds to keep.",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            json_schema_extra={"pattern": r"^ *[0-9]{0,18} *$"},
            description="SSE resume point: the id of the last event received.",
        ),
    ] = None,
) -> Response:
    wanted = _parse_kinds(kinds)
    cursor = _cursor(last_event_id, after)
    head = await bus.query(lambda r: r.head(experiment_id))
    if head is None:
        raise ApiError(404, "not_found", f"no experiment with id {experiment_id!r}")
    if format == "json":
        page = await _json_page(bus, experiment_id, cursor, limit, wanted, head)
        return JSONResponse(page.model_dump())
    return StreamingResponse(
        _stream(bus, experiment_id, cursor, wanted, still_authorized(request, services)),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


async def _json_page(
    bus: EventBus,
    experiment_id: str,
    after: int,
    limit: int,
    kinds: set[EventKind],
    head: StreamHead,
) -> EventPage:
    # ``head`` was read before the events: everything up to its id is in this read, and a status
    # event above it is newer than its status.
    events = await bus.query(lambda r: r.after(experiment_id, after, limit, kinds))
    more = len(events) == limit
    next_after = events[-1].id if more else max([after, head.last_id, *(e.id for e in events)])
    status = head.status
    for event in events:
        if event.kind == EventKind.STATUS and event.id > head.last_id:
            status = event.payload.get("to")
    finished = not more and status is not None and ExperimentStatus(status).is_terminal
    items = [
        EventOut(id=e.id, kind=e.kind, at=e.created_at.isoformat(), data=event_data(e))
        for e in events
    ]
    return EventPage(
        items=items, next_after=next_after, more=more, status=status, finished=finished
    )


@router.get(
    "/{experiment_id}/timeline",
    response_model=Timeline,
    summary="A run's status timeline",
    description="Every status transition of the run with its time and reason, oldest first.",
    responses=error_responses(404),
)
def read_timeline(experiment_id: ExperimentId, session: SessionDep) -> Timeline:
    service.get(session, experiment_id)
    rows = EventRepository(session).transitions(experiment_id)
    return Timeline(
        items=[
            TransitionOut(
                from_status=r.from_status,
                to_status=r.to_status,
                reason=r.reason,
                actor_key_id=r.actor_key_id,
                at=r.created_at.isoformat(),
            )
            for r in rows
        ]
    )
