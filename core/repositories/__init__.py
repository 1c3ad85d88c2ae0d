"""Every SQL statement of the service lives in these repositories; they never commit."""

from core.repositories.auth import AuthSessionRepository, KeyRepository, ProjectRepository
from core.repositories.checkpoints import CheckpointRepository
from core.repositories.events import EventRepository
from core.repositories.experiments import ExperimentFilter, ExperimentRepository
from core.repositories.metrics import MetricRepository, MetricWrite

__all__ = [
    "AuthSessionRepository",
    "CheckpointRepository",
    "EventRepository",
    "ExperimentFilter",
    "ExperimentRepository",
    "KeyRepository",
    "MetricRepository",
    "MetricWrite",
    "ProjectRepository",
]
