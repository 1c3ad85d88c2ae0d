"""What every job on this worker shares, runs and matches alike: the bounds the worker puts on it
(``RunLimits``) and what it tells the broker when it is over (``Outcome``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from workers.supervisor import Guards


class Outcome(StrEnum):
    """What the task should tell the broker after a job (``run_experiment``, ``matches.play``)."""

    DONE = "done"
    """The message is finished with (whatever the run's status): acknowledge it."""
    REQUEUE = "requeue"
    """The worker is shutting down mid-run: return the message so another run resumes it."""
    ELSEWHERE = "elsewhere"
    """The run is for an environment suite this worker does not serve (a message on a queue it
    should not consume): drop the message, leave the run queued for the reconciler."""


@dataclass(frozen=True)
class RunLimits:
    """How the worker bounds a run."""

    poll_interval_s: float
    time_limit_s: float
    lease_ttl_s: float = 60.0
    """How long the worker's hold on a run lasts without a renewal (``MARLFORGE_LEASE_TTL_S``);
    renewed every poll interval (``core.leases.service``)."""
    memory_mb: int = 4096
    """Resident memory the run's processes may hold, in MiB (``MARLFORGE_RUN_MEMORY_MB``)."""
    cancel_grace_s: float = 60.0
    """How long a run has to honour a cancel or the worker's shutdown before the worker kills it
    (``MARLFORGE_CANCEL_GRACE_S``)."""
    store_outage_s: float = 0.0
    """How long a checkpoint upload is tried again while the artifact store refuses it before
    the run fails (``MARLFORGE_STORE_OUTAGE_S``)."""
    checkpoint_bytes: int | None = None
    """The bytes of checkpoints a run may keep (``MARLFORGE_RUN_MAX_CHECKPOINT_MB``); None: no
    limit."""
    project_artifact_bytes: int | None = None
    """The bytes of checkpoints all runs of a project may keep together
    (``MARLFORGE_PROJECT_MAX_ARTIFACT_MB``); None: no limit."""

    def guards(self) -> Guards:
        """What the supervisor enforces on the job's child process (``workers.supervisor``)."""
        return Guards(self.poll_interval_s, self.memory_mb, self.cancel_grace_s)
