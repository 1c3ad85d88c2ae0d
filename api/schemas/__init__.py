"""The API's request and response bodies, one module per domain (experiment specs are not here:
they are parsed by ``learners.api.parse_spec``).

``from api.schemas import ExperimentOut`` (and the other names of ``__all__``) works as well; a
route imports its bodies from its domain's module.
"""

from api.schemas.artifacts import CheckpointList, CheckpointOut, MetricPage, MetricPointOut
from api.schemas.common import Progress
from api.schemas.experiments import ExperimentOut, ExperimentPage, LatestMetric, WorkerOut
from api.schemas.health import Health
from api.schemas.workers import RegisteredWorkerOut, WorkerList

__all__ = [
    "CheckpointList",
    "CheckpointOut",
    "ExperimentOut",
    "ExperimentPage",
    "Health",
    "LatestMetric",
    "MetricPage",
    "MetricPointOut",
    "Progress",
    "RegisteredWorkerOut",
    "WorkerList",
    "WorkerOut",
]
