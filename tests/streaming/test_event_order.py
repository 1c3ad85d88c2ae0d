"""Migration 0002: the events of one experiment commit in the order of their ids, whoever writes
them, so "every event after id N" never skips one that commits late. Events of different
experiments do not wait for each other."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy.orm import Session, sessionmaker
from stream_support import Run

from core.enums import EventKind
from core.experiments.events import EventRepository

pytestmark = pytest.mark.integration


def _last_event_id(sessions: sessionmaker[Session], experiment_id: str) -> int:
    with sessions() as session:
        return max(e.id for e in EventRepository(session).events(experiment_id))


def _add_event_in_thread(
    sessions: sessionmaker[Session], experiment_id: str, done: threading.Event
) -> threading.Thread:
    def work() -> None:
        with sessions() as session:
            EventRepository(session).add(experiment_id, EventKind.LOG, {"message": "second"})
            session.commit()
        done.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_a_later_event_of_the_same_experiment_waits_for_the_earlier_commit(
    start_run: Callable[[], Run], sessions: sessionmaker[Session]
) -> None:
    run = start_run()
    with sessions() as first:
        EventRepository(first).add(run.id, EventKind.LOG, {"message": "first"})
        first.flush()  # the first writer has drawn its id and holds the experiment's lock
        second_done = threading.Event()
        second = _add_event_in_thread(sessions, run.id, second_done)
        time.sleep(0.5)
        waited = not second_done.is_set()
        first.commit()
    second.join(timeout=30)

    assert waited, "the second writer committed while the first was still open"
    with sessions() as session:
        events = EventRepository(session).events(run.id)
    messages = [e.payload["message"] for e in events if e.kind == EventKind.LOG]
    assert messages == ["first", "second"]  # id order is commit order


def test_events_of_other_experiments_do_not_wait(
    start_run: Callable[[], Run], sessions: sessionmaker[Session]
) -> None:
    busy, other = start_run(), start_run()
    with sessions() as first:
        EventRepository(first).add(busy.id, EventKind.LOG, {"message": "open"})
        first.flush()
        done = threading.Event()
        thread = _add_event_in_thread(sessions, other.id, done)
        assert done.wait(timeout=10), "an unrelated experiment's event was blocked"
        first.commit()
    thread.join(timeout=10)
    assert _last_event_id(sessions, other.id) > 0
