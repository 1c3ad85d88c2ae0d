"""The service's closed vocabularies: an experiment's status, the kinds of its events, the roles of
keys, the classes of failures and the resource classes of workers."""

from __future__ import annotations

from enum import StrEnum


class ExperimentStatus(StrEnum):
    """Where an experiment is in its life.

    ``queued -> running -> succeeded | failed | cancelling -> cancelled``; a queued experiment can
    be cancelled directly, and a cancelled or failed one can be resumed (back to ``queued``).
    A sweep's run starts ``pending`` (not yet on the broker) and becomes ``queued`` when its sweep
    has a free slot under ``max_concurrent`` (``core.sweeps.scheduler``); it can be cancelled
    while pending, and resumes to ``pending``.
    """

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        """True when no worker will touch the experiment again unless it is resumed."""
        return self in TERMINAL_STATUSES


class MatchStatus(StrEnum):
    """Where a match is in its life: ``queued -> running -> succeeded | failed``. A match that
    cannot be played any more before it starts (its checkpoint was pruned) fails with the reason;
    ``cancelled`` is reserved for a match its project withdraws."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset(
    {ExperimentStatus.CANCELLED, ExperimentStatus.SUCCEEDED, ExperimentStatus.FAILED}
)
RESUMABLE_STATUSES = frozenset({ExperimentStatus.CANCELLED, ExperimentStatus.FAILED})


class EventKind(StrEnum):
    """What an ``experiment_events`` row records; written in the transaction it describes."""

    STATUS = "status"
    PROGRESS = "progress"
    METRICS = "metrics"
    CHECKPOINT = "checkpoint"
    LOG = "log"


class Role(StrEnum):
    """What an API key may do in its project; each role may do everything the one before may.

    ``viewer`` reads; ``member`` also submits, cancels and resumes; ``admin`` also manages the
    project's keys.
    """

    VIEWER = "viewer"
    MEMBER = "member"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        """True when this role may do what ``needed`` may."""
        order = list(Role)
        return order.index(self) >= order.index(needed)


class FailureClass(StrEnum):
    """Why a failed run failed, in a few words a dashboard can group by (``GET /metrics``); read
    from its ``status_reason`` by ``core.monitoring.repository``."""

    LOST_WORKER = "lost_worker"
    """Its worker was lost and it was not restarted (``max_restarts`` spent)."""
    OVER_MEMORY = "over_memory"
    """Its process grew above the memory budget and its worker stopped it."""
    TIME_LIMIT = "time_limit"
    """It trained longer than the run time limit."""
    NONFINITE_LOSS = "nonfinite_loss"
    """A loss became NaN or infinite."""
    PROCESS_DIED = "process_died"
    """Its process died without recording an end (a signal, the kernel's OOM killer)."""
    BROKER_UNREACHABLE = "broker_unreachable"
    """It could not be queued: the broker was unreachable."""
    ERROR = "error"
    """Anything else: an error the run raised, a spec no longer valid."""


class ResourceClass(StrEnum):
    """What a worker computes on, and so which of its backend's queues it consumes
    (``core.dispatch.queue``): ``cpu`` workers take the plain queue, ``gpu`` workers the ``-gpu``
    queue too."""

    CPU = "cpu"
    GPU = "gpu"
