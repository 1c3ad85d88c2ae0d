"""Helpers of the streaming tests: an API served on a real port, a run driven from the test with the
worker's own code, and a minimal SSE client."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.enums import ExperimentStatus
from core.lifecycle import transition
from core.models import ExperimentEvent
from learners.hooks import MetricPoint
from workers.runs.hooks import DatabaseHooks


class Server:
    """The API served by uvicorn in a thread of this process."""

    def __init__(self, app: Any, headers: dict[str, str]) -> None:
        self.headers = headers
        """What every request to it sends: a member key of project ``default``."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@dataclass
class Run:
    """An experiment driven like a worker drives it, from the test."""

    id: str
    sessions: sessionmaker[Session]
    hooks: DatabaseHooks
    step: int = 0
    names: list[str] = field(default_factory=lambda: ["train/episode_return", "learner/loss"])

    def move(self, expected: ExperimentStatus, to: ExperimentStatus, reason: str | None) -> None:
        with self.sessions() as session:
            assert transition(session, self.id, [expected], to, reason) is not None
            session.commit()

    def report(self, steps: int = 100) -> None:
        """One batch of metrics and the progress, committed at once."""
        self.step += steps
        self.hooks.metrics(
            [
                MetricPoint(self.step, time.time(), n, float(self.step + k))
                for k, n in enumerate(self.names)
            ]
        )
        self.hooks.progress(self.step)
        self.hooks.flush()


def db_events(sessions: sessionmaker[Session], experiment_id: str) -> list[tuple[int, str]]:
    """(id, kind) of every event of the experiment in the database, oldest first."""
    with sessions() as session:
        rows = session.execute(
            select(ExperimentEvent.id, ExperimentEvent.kind)
            .where(ExperimentEvent.experiment_id == experiment_id)
            .order_by(ExperimentEvent.id)
        ).all()
    return [(int(i), str(k)) for i, k in rows]


@dataclass
class SseEvent:
    """One parsed Server-Sent Event."""

    id: int | None
    event: str
    data: dict[str, Any] | None


class SseReader:
    """A minimal SSE client over httpx: yields events and, separately, counts comment lines."""

    def __init__(
        self,
        url: str,
        auth: dict[str, str],
        last_event_id: int | None = None,
        timeout: float = 30,
    ) -> None:
        headers = {"accept": "text/event-stream", **auth}
        if last_event_id is not None:
            headers["last-event-id"] = str(last_event_id)
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=10))
        self.response = self.client.send(
            self.client.build_request("GET", url, headers=headers), stream=True
        )
        self.comments = 0
        self._lines = self.response.iter_lines()

    def next(self) -> SseEvent:
        """The next event (blocks; comment lines are counted and skipped)."""
        fields: dict[str, str] = {}
        for line in self._lines:
            if not line:
                if "event" in fields or "data" in fields:
                    data = json.loads(fields["data"]) if "data" in fields else None
                    return SseEvent(
                        int(fields["id"]) if "id" in fields else None,
                        fields.get("event", "message"),
                        data,
                    )
                fields.clear()
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        raise EOFError("the stream ended")

    def until_end(self) -> list[SseEvent]:
        """Every event up to and including ``end``."""
        events = []
        while True:
            events.append(self.next())
            if events[-1].event == "end":
                return events

    def close(self) -> None:
        self.response.close()
        self.client.close()
