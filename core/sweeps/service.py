"""What can be done to a sweep: submit it, read where it stands, cancel and resume its runs.

A sweep's runs are ordinary experiments that name it (``sweep_id``) and their configuration
(``sweep_config``). They are all stored at submission, validated, in one transaction with the
sweep, as ``pending``; ``core.sweeps.scheduler.advance`` queues them as slots free up under the
sweep's ``max_concurrent``. A sweep with a model-based ``search`` stores none at submission: the
scheduler adds each configuration it proposes, with its runs, the same way (``add_runs``).
Cancelling or resuming a sweep does the same to each of its runs (and stops or restarts the
proposals).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.orm import Session

from core.db import utcnow
from core.enums import RESUMABLE_STATUSES, ExperimentStatus
from core.errors import NotFound
from core.experiments import warm_start
from core.experiments.events import EventRepository
from core.experiments.repository import ExperimentRepository
from core.experiments.service import Actor
from core.idempotency import service as idempotency
from core.ids import new_id
from core.lifecycle import transition
from core.models import Experiment, Sweep
from core.sweeps import pbt
from core.sweeps.repository import RunCounts, SweepRepository
from core.sweeps.space import Child, Expansion, SweepSpec

S = ExperimentStatus
ACTIVE = (S.PENDING, S.QUEUED, S.RUNNING, S.CANCELLING)


class SweepStatus(StrEnum):
    """Where a sweep stands, from its runs: ``running`` while any is pending, queued, running or
    cancelling; then ``succeeded`` when all succeeded, ``failed`` when any failed (the others'
    results stand; resuming the sweep retries it), else ``cancelled``."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


def status_of(counts: RunCounts) -> SweepStatus:
    """The sweep's status from its runs' (see ``SweepStatus``)."""
    if counts.count(*ACTIVE):
        return SweepStatus.RUNNING
    if counts.count(S.FAILED):
        return SweepStatus.FAILED
    if counts.count(S.CANCELLED):
        return SweepStatus.CANCELLED
    return SweepStatus.SUCCEEDED


@dataclass(frozen=True)
class SweepView:
    """A sweep with its runs' counts (what the API shows)."""

    sweep: Sweep
    counts: RunCounts

    @property
    def status(self) -> SweepStatus:
        if self.sweep.proposing:
            return SweepStatus.RUNNING  # more configurations to come
        return status_of(self.counts)

    @property
    def progress(self) -> tuple[int, int]:
        """The env steps its runs have trained and will train, all together. A PBT search's runs
        each train one round on from the step they continue (``core.sweeps.pbt``), and its
        budget is every member's whole one, rounds to come included."""
        counts, spec = self.counts, self.sweep.spec
        search = spec.get("search") or {}
        if search.get("method") != "pbt":
            return counts.step, counts.total_steps
        started = counts.total_steps - counts.total * int(search["round_steps"])
        budget = int(search["population"]) * int(spec["base"]["total_steps"])
        return min(max(counts.step - started, 0), budget), budget


def get(session: Session, sweep_id: str, project_id: str | None = None) -> Sweep:
    """The sweep (of the project, when given), or NotFound."""
    sweep = SweepRepository(session).get(sweep_id, project_id)
    if sweep is None:
        raise NotFound(f"no sweep with id {sweep_id!r}")
    return sweep


def view(session: Session, sweep: Sweep) -> SweepView:
    """The sweep with its runs' counts."""
    return SweepView(sweep, SweepRepository(session).counts([sweep.id])[sweep.id])


def views(session: Session, sweeps: list[Sweep]) -> list[SweepView]:
    """Each sweep with its runs' counts, in one query."""
    counts = SweepRepository(session).counts([s.id for s in sweeps])
    return [SweepView(s, counts[s.id]) for s in sweeps]


def submit(
    session: Session,
    spec: SweepSpec,
    expansion: Expansion,
    project_id: str,
    actor: Actor | None = None,
    claim: idempotency.Claim | None = None,
) -> Sweep:
    """Store the sweep and every run of its expansion as ``pending``, in one transaction, and
    commit; the caller then starts what fits (``scheduler.advance``). With a ``claim``,
    ``idempotency.KeyTaken`` (nothing stored) when a concurrent request took the key first."""
    now = utcnow()
    name = spec.name or str(spec.base.get("name", "")) or "sweep"
    stored = spec.model_dump(mode="json")
    if spec.proposes:
        # Proposed runs start from the checkpoint resolved now, not from a later "latest".
        stored["base"] = expansion.base
    sweep = Sweep(
        id=new_id(),
        project_id=project_id,
        created_by_key_id=actor.key_id if actor is not None else None,
        name=name,
        spec=stored,
        configurations=[c.stored() for c in expansion.configurations],
        seeds=expansion.seeds,
        max_concurrent=spec.max_concurrent,
        proposing=spec.proposes,
        created_at=now,
        updated_at=now,
    )
    SweepRepository(session).add(sweep)
    by = f" by {actor.label}" if actor is not None else ""
    add_runs(session, sweep, expansion.children, f"submitted{by} with sweep {sweep.id}")
    if claim is not None:
        idempotency.record(session, project_id, claim, sweep.id)
    session.commit()
    return sweep


def add_runs(session: Session, sweep: Sweep, children: list[Child], why: str) -> list[str]:
    """Store the children as the sweep's ``pending`` runs (not committed); their ids."""
    now = utcnow()
    experiments = ExperimentRepository(session)
    events = EventRepository(session)
    reason = f"{why}; waits for a slot of its max_concurrent"
    # Ids sort by creation time only to the millisecond: hand out sorted ones in start order, so
    # "oldest pending first" is the expansion's order (seed-major: every configuration's first
    # seed before any second one).
    ids = sorted(new_id() for _ in children)
    for run_id, child in zip(ids, children, strict=True):
        experiment = Experiment(
            id=run_id,
            project_id=sweep.project_id,
            created_by_key_id=sweep.created_by_key_id,
            name=child.spec["name"],
            algorithm=child.spec["algorithm"],
            backend=child.spec["backend"],
            spec=child.spec,
            status=S.PENDING,
            status_reason=reason,
            step=0,
            total_steps=child.spec["total_steps"],
            latest_metrics={},
            attempts=0,
            sweep_id=sweep.id,
            sweep_config=child.config,
            **warm_start.columns(child.spec),
            created_at=now,
            updated_at=now,
        )
        experiments.add(experiment)
        experiments.set_tags(run_id, child.spec.get("tags", []))
        events.add_transition(run_id, None, S.PENDING, reason, sweep.created_by_key_id)
    return ids


def submit_once(
    session: Session,
    spec: SweepSpec,
    expansion: Expansion,
    project_id: str,
    actor: Actor | None,
    claim: idempotency.Claim,
) -> tuple[Sweep, bool]:
    """``submit`` under an idempotency key that ``idempotency.lookup`` found new: the sweep and
    True, or, when a concurrent request with the key won the race, its sweep and False."""
    try:
        return submit(session, spec, expansion, project_id, actor, claim), True
    except idempotency.KeyTaken:
        return get(session, idempotency.winner(session, project_id, claim)), False


def cancel(session: Session, sweep_id: str, actor: Actor | None = None) -> list[str]:
    """Cancel every run of the sweep that has not ended: pending and queued ones at once, running
    ones ask their worker to stop (as ``core.experiments.service.cancel``). The ids changed."""
    by = f" by {actor.label}" if actor is not None else ""
    key_id = actor.key_id if actor is not None else None
    changed = []
    sweep = SweepRepository(session).lock(sweep_id)
    if sweep is not None:
        sweep.proposing = False  # a search proposes nothing more
    for run_id in SweepRepository(session).run_ids(sweep_id, [S.PENDING, S.QUEUED, S.RUNNING]):
        done = transition(
            session, run_id, [S.PENDING, S.QUEUED], S.CANCELLED,
            f"cancelled{by} with sweep {sweep_id} before it started",
            actor=key_id, finished_at=utcnow(),
        )  # fmt: skip
        if done is None:
            done = transition(
                session, run_id, [S.RUNNING], S.CANCELLING,
                f"cancel requested{by} with sweep {sweep_id}", actor=key_id,
            )  # fmt: skip
        if done is not None:
            changed.append(run_id)
    session.commit()
    return changed


def searched_all(sweep: Sweep) -> bool:
    """Whether the sweep's search has proposed all it will: a tpe search its trials, a pbt
    search its last round (a grid or random sweep proposes nothing)."""
    spec = SweepSpec.model_validate(sweep.spec)
    if (population := spec.population) is not None:
        last = max((int(c.get("round", 0)) for c in sweep.configurations), default=0)
        total = spec.base.get("total_steps")
        return last >= pbt.rounds(population, total if isinstance(total, int) else 0) - 1
    if (search := spec.model_search) is not None:
        return len(sweep.configurations) >= search.trials
    return True


def resume(session: Session, sweep_id: str, actor: Actor | None = None) -> list[str]:
    """Put every cancelled or failed run of the sweep back to ``pending`` (each continues from its
    latest checkpoint when started); the caller then starts what fits. The ids changed."""
    by = f" by {actor.label}" if actor is not None else ""
    key_id = actor.key_id if actor is not None else None
    changed = []
    sweep = SweepRepository(session).lock(sweep_id)
    search = (sweep.spec.get("search") if sweep is not None else None) or None
    if sweep is not None and search is not None and search.get("method") != "asha":
        # A search goes on proposing where it stopped: up to its trials, or its last round.
        sweep.proposing = not searched_all(sweep)
    for run_id in SweepRepository(session).run_ids(sweep_id, sorted(RESUMABLE_STATUSES)):
        reason = f"resumed{by} with sweep {sweep_id}; waits for a slot of its max_concurrent"
        moved = transition(
            session, run_id, sorted(RESUMABLE_STATUSES), S.PENDING, reason,
            actor=key_id, finished_at=None,
        )  # fmt: skip
        if moved is not None:
            changed.append(run_id)
    session.commit()
    return changed
