"""``Idempotency-Key``: a retried create request returns what the first one created.

A client that sends a create request (``POST /v1/experiments``; ``POST /v1/sweeps`` will take the
same) with an ``Idempotency-Key`` header gets, for every later request with that key and the same
body, the resource the first one created: nothing is stored or queued twice. The same key with a
different body (compared as canonical JSON: sorted keys, no spaces), or from another route, is a
409 ``idempotency_conflict``. Keys belong to a project (two projects may use the same key) and are
kept ``TTL`` (a day) at least: ``Purger`` forgets older ones hourly in the API process, and an
expired key met by a request is forgotten on the spot, so it works as a new one.

Races: the key's row is inserted in the transaction that creates the resource, under a unique
(project, key). Of two requests racing with one key, the second insert waits for the first
transaction and then fails; ``KeyTaken`` tells the service, which rolls back and answers with the
winner's resource (``lookup`` again).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from core.background import Periodic
from core.db import utcnow
from core.errors import Conflict
from core.idempotency.repository import IdempotencyRepository
from core.models import IdempotencyKey

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200
KEY_PATTERN = "^[ -~]*[!-~][ -~]*$"
"""Printable ASCII with at least one character that is not a space (``key_problem`` checks it)."""
TTL = dt.timedelta(hours=24)
"""How long a key is kept at least (the purge forgets it some time after)."""


class IdempotencyConflict(Conflict):
    """The key was used with a different body or on another route."""

    code = "idempotency_conflict"


class KeyTaken(Exception):
    """A concurrent request inserted the same key first (its transaction is rolled back)."""


@dataclass(frozen=True)
class Claim:
    """A request's key, where it was sent (``scope``) and the hash of its body."""

    key: str
    scope: str
    request_hash: str


def key_problem(raw: str) -> str | None:
    """Why ``raw`` is not a usable key (None when it is): 1 to 200 printable ASCII characters."""
    if not raw.strip():
        return "empty"
    if len(raw) > MAX_KEY_LENGTH:
        return f"longer than {MAX_KEY_LENGTH} characters"
    if not all(" " <= c <= "~" for c in raw):
        return "holds a character that is not printable ASCII"
    return None


def body_hash(body: Any) -> str:
    """The sha256 of ``body`` as canonical JSON: key order and spacing do not change it."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def claim_of(key: str, scope: str, body: Any) -> Claim:
    """The claim of a request with a valid ``key`` (see ``key_problem``) on ``scope``."""
    return Claim(key=key, scope=scope, request_hash=body_hash(body))


def lookup(session: Session, project_id: str, claim: Claim) -> str | None:
    """The id of what an earlier request with this key created, or None when the key is new (or
    expired: then it is forgotten). IdempotencyConflict when that request differed."""
    repo = IdempotencyRepository(session)
    row = repo.get(project_id, claim.key)
    if row is None:
        return None
    if row.created_at < utcnow() - TTL:
        repo.delete(project_id, claim.key)
        session.commit()
        return None
    if row.scope != claim.scope:
        raise IdempotencyConflict(
            f"the {HEADER} {claim.key!r} was already used to create {row.scope}, not {claim.scope}"
        )
    if row.request_hash != claim.request_hash:
        raise IdempotencyConflict(
            f"the {HEADER} {claim.key!r} was already used with a different body (it created "
            f"{row.resource_id}); use a new key for a different request"
        )
    return row.resource_id


def record(session: Session, project_id: str, claim: Claim, resource_id: str) -> None:
    """Tie the key to the resource created in this (uncommitted) transaction; KeyTaken, after
    rolling it back, when a concurrent request holds the key."""
    row = IdempotencyKey(
        project_id=project_id,
        key=claim.key,
        scope=claim.scope,
        request_hash=claim.request_hash,
        resource_id=resource_id,
        created_at=utcnow(),
    )
    try:
        IdempotencyRepository(session).add(row)
    except IntegrityError:
        session.rollback()
        raise KeyTaken(claim.key) from None


def winner(session: Session, project_id: str, claim: Claim) -> str:
    """After ``KeyTaken``: the id of what the concurrent request that won the key created
    (IdempotencyConflict when its body differed; Conflict when its key was already purged)."""
    existing = lookup(session, project_id, claim)
    if existing is None:  # the winner's key was purged in between: vanishingly rare
        raise Conflict(f"the {HEADER} {claim.key!r} is in use; retry")
    return existing


def purge(session: Session, now: dt.datetime | None = None) -> int:
    """Forget the keys older than ``TTL``; how many (the caller commits)."""
    return IdempotencyRepository(session).purge((now or utcnow()) - TTL)


class Purger(Periodic):
    """Runs ``purge`` hourly in a daemon thread of the API process until ``stop``."""

    INTERVAL_S = 3600.0

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        super().__init__("idempotency-purger", self.INTERVAL_S, first_delay_s=60.0)
        self.session_factory = session_factory

    def work(self) -> float | None:
        with self.session_factory() as session:
            purged = purge(session)
            session.commit()
        if purged:
            log.info("forgot %d idempotency key(s) older than %s", purged, TTL)
        return None
