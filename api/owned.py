"""The row a route's path names, of the caller's project, or a 404.

Every way of not finding it is the same answer: an id that is not an id (it never reaches SQL),
a row that does not exist and a row of another project, whose existence is not revealed
(``api.auth``). A route keeps its own small dependency, which names its path parameter, and
calls ``owned_or_404`` with its repository's lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.orm import Session

from api.errors import ApiError
from core.experiments.checkpoints import CheckpointRepository
from core.ids import is_id
from core.models import Checkpoint

Row = TypeVar("Row")


def owned_or_404(
    lookup: Callable[[str, str], Row | None], thing: str, row_id: str, project_id: str
) -> Row:
    """What ``lookup(row_id, project_id)`` finds (None: nothing of that project), or
    ``404 not_found: no <thing> with id '<row_id>'``."""
    row = lookup(row_id, project_id) if is_id(row_id) else None
    if row is None:
        raise ApiError(404, "not_found", f"no {thing} with id {row_id!r}")
    return row


def checkpoint_or_404(session: Session, experiment_id: str, checkpoint_id: str) -> Checkpoint:
    """The checkpoint of an experiment the caller may read (``api.auth.ExperimentId``), or
    ``404 not_found: no checkpoint '<checkpoint_id>' in <experiment_id>``."""
    row = CheckpointRepository(session).get(experiment_id, checkpoint_id)
    if row is None:
        raise ApiError(404, "not_found", f"no checkpoint {checkpoint_id!r} in {experiment_id}")
    return row
