"""The database schema as SQLAlchemy 2.0 typed models (the migrations build the same tables).

- ``projects``: the owners of experiments; every key belongs to one.
- ``api_keys``: a project's keys, each with a role, stored only as a keyed hash.
- ``auth_sessions``: dashboard sign-ins (cookie sessions) and one-time login tokens of a key.
- ``experiments``: one row per submitted spec: its project, status, progress and its worker's lease.
- ``sweeps``: a base spec, a search space and seeds (``core.sweeps``); its runs are experiments
  that name it (``experiments.sweep_id``) and their configuration (``experiments.sweep_config``).
- ``experiment_tags``: one row per tag of an experiment (its spec's ``tags``), for ``?tag=``.
- ``metric_points``: every scalar a run reported, unique per (experiment, name, step).
- ``metric_tiers``: each series summarised over aligned step ranges, for charts of long runs.
- ``checkpoints``: the files a run saved, with their size and sha256.
- ``status_transitions``: every status change with its time and reason (the status timeline).
- ``matches``: one team's policy against another's: each team's checkpoint, episodes, the result.
- ``idempotency_keys``: each ``Idempotency-Key`` a project sent with a create request, the hash of
  its body and the resource it created (``core.idempotency.service``), kept at least a day.
- ``workers``: the registry of workers (``core.fleet.registry``): one row per worker and backend it
  consumes, with its queues, resource class and GPUs, refreshed by the worker's heartbeat.
- ``experiment_events``: a global, monotonic log of what happened to each experiment (status,
  progress, metrics batches, checkpoints, log lines), written in the same transaction as the change
  it describes, so a reader that follows ids never misses or sees a change twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from core.db import UTCDateTime
from core.enums import EventKind, ExperimentStatus, MatchStatus, ResourceClass, Role
from learners.api import Algorithm, Backend

# JSONB on PostgreSQL (indexable, compact), JSON text elsewhere.
JSONType = JSON().with_variant(postgresql.JSONB(), "postgresql")
# A 64-bit auto-increment key; SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def _str_enum(enum_cls: type[Any]) -> Enum:
    # Stored as plain strings without a CHECK constraint: adding an algorithm or backend to the
    # catalogue must not need a migration.
    return Enum(
        enum_cls,
        native_enum=False,
        create_constraint=False,
        length=32,
        values_callable=lambda members: [m.value for m in members],
    )


class Base(DeclarativeBase):
    """The declarative base of every table."""


class Project(Base):
    """A team's space: its experiments and the keys that reach them."""

    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class ApiKey(Base):
    """An API key of a project: only its keyed hash is stored; ``prefix`` names it to people."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100))
    role: Mapped[Role] = mapped_column(_str_enum(Role))
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    created_by_key_id: Mapped[str | None] = mapped_column(String(26))
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


class AuthSession(Base):
    """A dashboard sign-in of a key (``kind`` ``session``: the cookie) or a one-time login token
    that can be exchanged for one (``kind`` ``login``). Only the token's keyed hash is stored."""

    __tablename__ = "auth_sessions"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    key_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("api_keys.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class Sweep(Base):
    """A study: one base spec trained over a search space's configurations × seeds
    (``core.sweeps``). Its runs are ordinary experiments naming it; its status is theirs."""

    __tablename__ = "sweeps"
    __table_args__ = (Index("ix_sweeps_project_id_id", "project_id", "id"),)

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("projects.id", ondelete="RESTRICT")
    )
    created_by_key_id: Mapped[str | None] = mapped_column(String(26))
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    """The sweep as submitted (``core.sweeps.space.SweepSpec``: base, space, seeds...)."""
    configurations: Mapped[list[Any]] = mapped_column(JSONType)
    """``[{"key": "c0", "params": {path: value}}, ...]``: expanded, or proposed by a search."""
    seeds: Mapped[list[Any]] = mapped_column(JSONType)
    max_concurrent: Mapped[int] = mapped_column(Integer)
    """At most this many of its runs are queued or running at once; the rest wait ``pending``."""
    proposing: Mapped[bool] = mapped_column(Boolean, server_default=false())
    """A search (``core.sweeps.tpe``) with configurations left to propose; false for a grid."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class Experiment(Base):
    """A submitted spec and where its run stands."""

    __tablename__ = "experiments"
    __table_args__ = (Index("ix_experiments_queue_status", "queue", "status"),)

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("projects.id", ondelete="RESTRICT"), index=True
    )
    created_by_key_id: Mapped[str | None] = mapped_column(String(26))
    name: Mapped[str] = mapped_column(String(200))
    algorithm: Mapped[Algorithm] = mapped_column(_str_enum(Algorithm), index=True)
    backend: Mapped[Backend] = mapped_column(_str_enum(Backend), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    status: Mapped[ExperimentStatus] = mapped_column(_str_enum(ExperimentStatus), index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    step: Mapped[int] = mapped_column(BigInteger, default=0)
    total_steps: Mapped[int] = mapped_column(BigInteger)
    latest_metrics: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    """How many times the run was queued again after its worker was lost (``core.leases``)."""
    worker_id: Mapped[str | None] = mapped_column(String(200))
    """The worker that holds (or last held) the run."""
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    """When that worker last renewed its lease."""
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), index=True)
    """When the hold lapses unless renewed; NULL when no worker holds the run."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    sweep_id: Mapped[str | None] = mapped_column(
        String(26), ForeignKey("sweeps.id", ondelete="RESTRICT"), index=True
    )
    """The sweep the run belongs to (NULL for a run submitted on its own)."""
    sweep_config: Mapped[str | None] = mapped_column(String(16))
    """Its configuration's key within the sweep (``c0``, ``c1``...)."""
    compacted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    """When its progress and metrics events were dropped and its long series thinned
    (``core.retention.service``); NULL until then."""
    device: Mapped[str | None] = mapped_column(String(200))
    """The device its worker resolved for it when it last started the run (``cpu``,
    ``cuda:0 (NVIDIA H100 80GB HBM3)``); NULL until a worker started it."""
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    """When the reconciler last sent its message again (``core.dispatch.reconcile``: the broker held
    none); NULL until it did."""
    init_experiment_id: Mapped[str | None] = mapped_column(String(26), index=True)
    """The run it warm-started from (its spec's ``init.experiment_id``); NULL for a fresh start."""
    init_checkpoint_id: Mapped[str | None] = mapped_column(String(26), index=True)
    """That run's checkpoint it starts from, resolved at submission
    (``core.experiments.warm_start``): kept by its run's pruning while a warm start names it."""
    queue: Mapped[str | None] = mapped_column(String(200))
    """The queue its message was last sent on (``core.dispatch.queue.queue_for``, with the
    deployment's prefix): a worker taking a message of that queue starts the fairest of its queued
    runs (``core.dispatch.fair_share``); NULL for a run queued before the column existed."""
    interrupted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    """When the service put the started run back in its queue (a lost worker's takeover, a
    stopping worker, a local worker's restart): it goes ahead of new work. NULL otherwise; a
    worker's claim clears it."""


class ExperimentTag(Base):
    """One of an experiment's tags (a copy of its spec's ``tags``, indexed for the list filter)."""

    __tablename__ = "experiment_tags"
    __table_args__ = (Index("ix_experiment_tags_tag", "tag", "experiment_id"),)

    experiment_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    tag: Mapped[str] = mapped_column(String(50), primary_key=True)


class MetricPointRow(Base):
    """One scalar ``name`` = ``value`` at env step ``step`` (``value`` is NULL when not finite)."""

    __tablename__ = "metric_points"
    __table_args__ = (
        UniqueConstraint("experiment_id", "name", "step", name="uq_metric_points_key"),
        Index("ix_metric_points_experiment_step", "experiment_id", "step"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("experiments.id", ondelete="CASCADE")
    )
    step: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(200))
    value: Mapped[float | None] = mapped_column(Double)
    wall_time: Mapped[float] = mapped_column(Double)


class MetricTierRow(Base):
    """The summary of the points of series ``name`` in steps ``bucket * 4 ** tier`` up to, not
    including, ``(bucket + 1) * 4 ** tier`` (``core.metrics.tiers.Summary``); a range with no points
    has no row."""

    __tablename__ = "metric_tiers"

    experiment_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    tier: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    points: Mapped[int] = mapped_column(BigInteger)
    first_step: Mapped[int] = mapped_column(BigInteger)
    first_wall: Mapped[float] = mapped_column(Double)
    last_step: Mapped[int] = mapped_column(BigInteger)
    low_value: Mapped[float | None] = mapped_column(Double)
    low_step: Mapped[int | None] = mapped_column(BigInteger)
    low_wall: Mapped[float | None] = mapped_column(Double)
    high_value: Mapped[float | None] = mapped_column(Double)
    high_step: Mapped[int | None] = mapped_column(BigInteger)
    high_wall: Mapped[float | None] = mapped_column(Double)


class Checkpoint(Base):
    """A checkpoint file under the artifacts directory (``path`` is relative to it)."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("experiment_id", "step", name="uq_checkpoints_step"),)

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    experiment_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    step: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    eval_return: Mapped[float | None] = mapped_column(Double)
    """The run's ``eval/episode_return`` at ``step`` (NULL when none was taken at that step): the
    checkpoint with the highest is the run's best."""


class StatusTransition(Base):
    """One status change: from what (NULL for the first), to what, why and when."""

    __tablename__ = "status_transitions"
    __table_args__ = (Index("ix_status_transitions_experiment", "experiment_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("experiments.id", ondelete="CASCADE")
    )
    from_status: Mapped[ExperimentStatus | None] = mapped_column(_str_enum(ExperimentStatus))
    to_status: Mapped[ExperimentStatus] = mapped_column(_str_enum(ExperimentStatus))
    reason: Mapped[str | None] = mapped_column(Text)
    actor_key_id: Mapped[str | None] = mapped_column(String(26))
    """The key whose request made the change (submit, cancel, resume); NULL for workers."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class ExperimentEvent(Base):
    """One thing that happened to an experiment; ``id`` grows monotonically across all of them."""

    __tablename__ = "experiment_events"
    __table_args__ = (
        Index("ix_experiment_events_experiment", "experiment_id", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("experiments.id", ondelete="CASCADE")
    )
    kind: Mapped[EventKind] = mapped_column(_str_enum(EventKind))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class Match(Base):
    """One team's policy against another's (``core.matches``): what each team plays with, how
    many episodes, and, once played, each team's mean return and the scenario's own score."""

    __tablename__ = "matches"
    __table_args__ = (Index("ix_matches_project_id_id", "project_id", "id"),)

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("projects.id", ondelete="CASCADE")
    )
    created_by_key_id: Mapped[str | None] = mapped_column(String(26))
    name: Mapped[str] = mapped_column(String(200))
    env: Mapped[dict[str, Any]] = mapped_column(JSONType)
    """``{"suite", "id", "kwargs"}`` of the scenario played."""
    teams: Mapped[dict[str, Any]] = mapped_column(JSONType)
    """Per team: ``"random"`` or ``{"experiment_id", "checkpoint_id", "step", "algorithm",
    "backend", "sha256"}`` of the checkpoint chosen at submission."""
    episodes: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    backend: Mapped[Backend] = mapped_column(_str_enum(Backend))
    """The queue it is played from (the first checkpoint's backend; any loads any checkpoint)."""
    status: Mapped[MatchStatus] = mapped_column(_str_enum(MatchStatus))
    status_reason: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    replay_path: Mapped[str | None] = mapped_column(String(500))
    """The replay GIF's key in the artifact store, once played."""
    worker_id: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    """When the reconciler last sent its message again (``core.dispatch.reconcile``); NULL until
    then."""


class IdempotencyKey(Base):
    """An ``Idempotency-Key`` of a project: which create request (``scope``, the body's hash) it
    came with and the id of the resource that request created (``core.idempotency.service``)."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_created_at", "created_at"),)

    project_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    scope: Mapped[str] = mapped_column(String(32))
    """What the key created: ``experiments`` (later ``sweeps``)."""
    request_hash: Mapped[str] = mapped_column(String(64))
    """The sha256 of the body as canonical JSON (sorted keys, no spaces)."""
    resource_id: Mapped[str] = mapped_column(String(26))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class WorkerRecord(Base):
    """A live (or lately seen) worker, for one backend whose queues it consumes
    (``core.fleet.registry``): a worker of several backends has a row for each. It writes its rows
    when it is ready, refreshes ``last_seen_at`` on its heartbeat and deletes them when it shuts
    down cleanly; a killed worker's rows stay until they are old, and a reader counts a row as live
    only while it is fresh."""

    __tablename__ = "workers"
    __table_args__ = (
        Index("ix_workers_backend_class_seen", "backend", "resource_class", "last_seen_at"),
    )

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    """The worker's name (``MARLFORGE_WORKER_NAME``, or ``<host>-<pid>``), as in its leases."""
    backend: Mapped[Backend] = mapped_column(_str_enum(Backend), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    queues: Mapped[list[Any]] = mapped_column(JSONType)
    """The broker queues of this backend it consumes, in the order it looks at them."""
    resource_class: Mapped[ResourceClass] = mapped_column(_str_enum(ResourceClass))
    """``gpu`` when it consumes the backend's GPU queue, else ``cpu``."""
    gpus: Mapped[list[Any]] = mapped_column(JSONType)
    """The names of the GPUs the backend's framework sees there (``[]`` for a CPU worker)."""
    suites: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    """The environment suites it serves (``MARLFORGE_WORKER_SUITES``, else every suite it can
    build); NULL: a worker from before workers reported them, taken to serve every suite."""
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
