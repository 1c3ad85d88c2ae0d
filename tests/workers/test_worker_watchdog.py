"""The consumer watchdog's judgement: idle beside waiting messages for long enough is deaf; a
busy worker, an empty queue or an unreachable broker never is. (The real sequence, a Redis outage
that leaves a Celery worker deaf, is reproduced in tests/e2e/test_e2e_broker_outage.py.)"""

from __future__ import annotations

from workers.watchdog import Watchdog


class Broker:
    def __init__(self) -> None:
        self.waiting: int | Exception = 0

    def count(self) -> int:
        if isinstance(self.waiting, Exception):
            raise self.waiting
        return self.waiting


def test_idle_beside_waiting_messages_for_long_enough_is_deaf() -> None:
    broker, busy = Broker(), [False]
    dog = Watchdog(broker.count, lambda: busy[0], deaf_after_s=10)
    broker.waiting = 2
    assert dog.check(0.0) is None
    assert dog.check(9.0) is None
    reason = dog.check(10.0)
    assert reason is not None and "2 message(s) have waited in its queues for 10 s" in reason


def test_a_busy_worker_an_empty_queue_or_a_lost_broker_starts_the_count_again() -> None:
    broker, busy = Broker(), [False]
    dog = Watchdog(broker.count, lambda: busy[0], deaf_after_s=10)
    broker.waiting = 1
    dog.check(0.0)
    busy[0] = True  # took the message: a long run is never judged
    assert dog.check(20.0) is None
    busy[0] = False
    assert dog.check(21.0) is None and dog.check(30.0) is None  # counting from 21 s
    broker.waiting = ConnectionError("redis down")
    assert dog.check(32.0) is None
    broker.waiting = 0
    assert dog.check(40.0) is None
    broker.waiting = 3
    assert dog.check(41.0) is None and dog.check(50.0) is None
    assert dog.check(51.0) is not None
