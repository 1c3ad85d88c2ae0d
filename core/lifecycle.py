"""Status changes: conditional on the status the caller expects, recorded in the timeline.

Every change goes through ``transition`` so that ``status_transitions`` and ``experiment_events``
hold exactly the changes that happened, in the same transaction as the change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.experiments.events import EventRepository
from core.experiments.repository import ExperimentRepository


def transition(
    session: Session,
    experiment_id: str,
    expected: Iterable[ExperimentStatus],
    to: ExperimentStatus,
    reason: str | None,
    *,
    actor: str | None = None,
    condition: ColumnElement[bool] | None = None,
    **values: Any,
) -> ExperimentStatus | None:
    """Move the experiment to ``to`` if its status is one of ``expected``.

    Returns the status it moved from, or None when it was in none of them (or does not exist).
    ``values`` are further columns to set in the same UPDATE; ``condition`` a further condition of
    that UPDATE (a lease that must have lapsed); ``actor`` is the id of the key whose request made
    the change (the timeline keeps it). The caller commits.
    """
    experiments = ExperimentRepository(session)
    for source in expected:
        if experiments.change_status(experiment_id, source, to, reason, values, condition):
            EventRepository(session).add_transition(experiment_id, source, to, reason, actor)
            return source
    return None
