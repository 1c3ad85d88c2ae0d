"""The reconciler (``core.dispatch.reconcile``) on PostgreSQL (each test rolled back) with the
embedded broker's folder and a real Redis: a queued run whose message is gone is sent again, once; a
run whose message waits, or that was queued moments ago, is left alone; of two API processes racing
on the same read, one sends (other tests' committed runs may share the database: each test looks at
its own rows only). Time passes by handing ``reconcile`` a later ``now``."""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.db import utcnow
from core.dispatch.queue import CeleryDispatcher, held_runs
from core.dispatch.reconcile import RESENT, reconcile
from core.enums import EventKind
from core.experiments import service as experiments
from core.experiments.repository import ExperimentRepository
from core.matches.repository import MatchRepository
from core.models import ExperimentEvent
from core.settings import Settings
from learners.admission.parse import parse_spec
from tests.auth_support import default_project_id
from tests.broker_support import queued_messages as broker_messages

pytestmark = pytest.mark.integration
GRACE = 30.0


@pytest.fixture
def settings(tmp_path: Path, pg_url: str) -> Settings:
    return Settings(
        var_dir=tmp_path, database_url=pg_url, broker_url="filesystem://", queue_prefix="recon."
    )


@pytest.fixture
def dispatcher(settings: Settings) -> CeleryDispatcher:
    return CeleryDispatcher(settings)


@pytest.fixture
def submit(
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    tiny_spec: Callable[..., dict[str, Any]],
) -> Callable[..., str]:
    def run(**changes: Any) -> str:
        with rollback_sessions() as session:
            spec = parse_spec(tiny_spec(**changes))
            return experiments.submit(session, dispatcher, spec, default_project_id(session)).id

    return run


def _later(seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=seconds)


def _messages(settings: Settings, experiment_id: str) -> list[str]:
    return [m["queue"] for m in broker_messages(settings) if m["args"] == [experiment_id]]


def _logs(sessions: sessionmaker[Session], experiment_id: str) -> list[str]:
    with sessions() as session:
        rows = session.scalars(
            select(ExperimentEvent).where(
                ExperimentEvent.experiment_id == experiment_id,
                ExperimentEvent.kind == EventKind.LOG,
            )
        ).all()
    return [row.payload["message"] for row in rows]


def test_a_run_whose_message_is_gone_is_sent_again_once_to_its_suites_queue(
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    settings: Settings,
    submit: Callable[..., str],
) -> None:
    lost, kept = submit(name="lost"), submit(name="kept")
    assert held_runs(settings) == {lost, kept}
    (path,) = [p for p in (settings.broker_dir / "queue").glob("*.msg") if _holds(p, lost)]
    path.unlink()  # as a broker that restarted without its data, or an API that never sent it
    assert held_runs(settings) == {kept}

    # Within the grace period nothing is sent: the message may be on its way.
    early = reconcile(rollback_sessions, dispatcher, GRACE, now=_later(1))
    assert early is not None and lost not in early.resent
    assert _messages(settings, lost) == []

    done = reconcile(rollback_sessions, dispatcher, GRACE, now=_later(GRACE + 1))
    assert done is not None and lost in done.resent and kept not in done.resent
    assert _messages(settings, lost) == ["recon.torch.gymnasium"]
    assert _messages(settings, kept) == ["recon.torch.gymnasium"]
    assert _logs(rollback_sessions, lost) == [RESENT] and _logs(rollback_sessions, kept) == []
    # The next pass finds its message in the broker: nothing more is sent.
    again = reconcile(rollback_sessions, dispatcher, GRACE, now=_later(2 * GRACE + 2))
    assert again is not None and lost not in again.resent
    assert len(_messages(settings, lost)) == 1
    # Its place in the queue is still the database's: it was queued just before ``kept`` (other
    # tests' committed runs of the same queue may wait ahead of both).
    with rollback_sessions() as session:
        first = experiments.queue_position(session, experiments.get(session, lost))
        second = experiments.queue_position(session, experiments.get(session, kept))
        assert first is not None and second == first + 1


def _holds(path: Path, experiment_id: str) -> bool:
    return [m["args"] for m in _read(path)] == [[experiment_id]]


def _read(path: Path) -> list[dict[str, Any]]:
    payload = json.loads(path.read_text())
    return [{"args": json.loads(base64.b64decode(payload["body"]))[0]}]


def test_of_two_processes_racing_on_the_same_read_one_sends(
    rollback_sessions: sessionmaker[Session],
    settings: Settings,
    submit: Callable[..., str],
) -> None:
    run = submit()
    for path in (settings.broker_dir / "queue").glob("*.msg"):
        path.unlink()
    now = _later(GRACE + 1)
    with rollback_sessions() as session:
        (read_by_a,) = [
            e for e in ExperimentRepository(session).queued_before(now, 500) if e.id == run
        ]
    with rollback_sessions() as session:
        (read_by_b,) = [
            e for e in ExperimentRepository(session).queued_before(now, 500) if e.id == run
        ]
    with rollback_sessions() as session:
        won = ExperimentRepository(session).mark_dispatched(read_by_a, now)
        lost = ExperimentRepository(session).mark_dispatched(read_by_b, now)
        session.commit()
    assert read_by_a.id == read_by_b.id == run
    assert (won, lost) == (True, False)


def test_a_run_that_is_no_longer_queued_is_left_alone(
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    settings: Settings,
    submit: Callable[..., str],
) -> None:
    run = submit()
    for path in (settings.broker_dir / "queue").glob("*.msg"):
        path.unlink()
    with rollback_sessions() as session:
        experiments.cancel(session, run)
    done = reconcile(rollback_sessions, dispatcher, GRACE, now=_later(GRACE + 1))
    assert done is not None and run not in done.resent
    assert _messages(settings, run) == []


def test_redis_holds_waiting_and_taken_messages(settings: Settings, redis_url: str) -> None:
    """``held_runs`` on a real Redis: a message waiting in a queue, and one a worker took and has
    not acknowledged (kombu's ``unacked`` hash), both count; other tasks' messages do not."""
    import redis

    prefix = f"recon-{secrets.token_hex(3)}."
    on_redis = settings.model_copy(update={"broker_url": redis_url, "queue_prefix": prefix})
    dispatcher = CeleryDispatcher(on_redis)
    client = redis.Redis.from_url(redis_url)
    taken = f"T{secrets.token_hex(12)}"
    try:
        dispatcher.enqueue("01JAAAAAAAAAAAAAAAAAAAAAAA", "torch", "auto", "mpe")
        dispatcher.enqueue_match("01JBBBBBBBBBBBBBBBBBBBBBBB", "torch", "mpe")
        (raw,) = client.lrange(f"{prefix}torch.mpe", -1, -1)  # the run's (sent first)
        # As kombu keeps a message a worker took: [payload, exchange, routing key].
        payload = json.loads(raw)
        body = json.loads(base64.b64decode(payload["body"]))
        body[0] = ["01JCCCCCCCCCCCCCCCCCCCCCCC"]
        payload["body"] = base64.b64encode(json.dumps(body).encode()).decode()
        client.hset("unacked", taken, json.dumps([payload, "x", "y"]))
        held = held_runs(on_redis)
        assert held is not None
        assert {"01JAAAAAAAAAAAAAAAAAAAAAAA", "01JCCCCCCCCCCCCCCCCCCCCCCC"} <= held
        assert "01JBBBBBBBBBBBBBBBBBBBBBBB" not in held  # a match's message is not a run's
    finally:
        client.hdel("unacked", taken)
        for key in client.scan_iter(match=f"*{prefix}*"):
            client.delete(key)
        client.close()


def test_a_match_whose_message_is_gone_is_sent_again_once_saying_so(
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    settings: Settings,
) -> None:
    from core.matches import service as matches

    with rollback_sessions() as session:
        spec = matches.parse_match(
            {"env": {"id": "simple_tag_v3"}, "teams": {"adversary": "random", "agent": "random"}}
        )
        match = matches.submit(session, dispatcher, spec, default_project_id(session), None)
    for path in (settings.broker_dir / "queue").glob("*.msg"):
        path.unlink()

    done = reconcile(rollback_sessions, dispatcher, GRACE, now=_later(GRACE + 1))

    assert done is not None and match.id in done.resent_matches
    sent = [m for m in broker_messages(settings) if m["args"] == [match.id]]
    assert [(m["task"], m["queue"]) for m in sent] == [("marlforge.play_match", "recon.torch.mpe")]
    with rollback_sessions() as session:
        reread = MatchRepository(session).get(match.id)
        assert reread is not None and reread.status_reason == RESENT
    again = reconcile(rollback_sessions, dispatcher, GRACE, now=_later(2 * GRACE + 2))
    assert again is not None and match.id not in again.resent_matches
