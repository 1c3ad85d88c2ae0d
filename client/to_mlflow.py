"""A run in MLflow (``marlforge export mlflow``), logged with MLflow's own client to a tracking
server: the stored spec as params (flattened to dotted keys), every metric point at its step and
time, the run's identity as tags, and the policy-only export of its best (else latest) checkpoint
as an artifact. One MLflow run per MARLForge run, in an MLflow experiment named after the
project's (``--experiment``; default ``marlforge``); exporting a run again makes a new MLflow run
and says so (``marlforge.experiment_id`` tags find the earlier ones)."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.api import Client
from client.transport import ApiError, Json

MAX_PARAM_VALUE = 6000
"""MLflow's longest param value; a longer one (a long list) is cut and marked."""
METRICS_PER_BATCH = 1000
PARAMS_PER_BATCH = 100
_STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}


@dataclass(frozen=True)
class Logged:
    """What ``log_run`` logged."""

    experiment_id: str
    mlflow_run_id: str
    mlflow_experiment_id: str
    params: int
    points: int
    artifact: str | None


def flatten(spec: Json, prefix: str = "") -> dict[str, str]:
    """``spec``'s leaves as ``{"hyperparameters.lr": "0.0003", ...}``."""
    out: dict[str, str] = {}
    for key, value in spec.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            text = value if isinstance(value, str) else _json(value)
            if len(text) > MAX_PARAM_VALUE:
                text = text[: MAX_PARAM_VALUE - 3] + "..."
            out[name] = text
    return out


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def log_run(
    client: Client, run: Json, tracking_uri: str, experiment_name: str = "marlforge"
) -> Logged:
    """Log ``run`` (an experiment as the API gives it) to the MLflow server at ``tracking_uri``."""
    try:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient
    except ImportError as exc:  # pragma: no cover - the extra is part of every install here
        raise RuntimeError("MLflow is not installed: pip install 'marlforge[tracking]'") from exc
    mlflow = MlflowClient(tracking_uri=tracking_uri)
    found = mlflow.get_experiment_by_name(experiment_name)
    mlflow_experiment = found.experiment_id if found else mlflow.create_experiment(experiment_name)
    tags = {
        "marlforge.experiment_id": run["id"],
        "marlforge.algorithm": str(run.get("algorithm")),
        "marlforge.backend": str(run.get("backend")),
        "marlforge.status": str(run.get("status")),
        **{f"marlforge.tag.{t}": "" for t in run.get("spec", {}).get("tags", []) or []},
    }
    created = mlflow.create_run(mlflow_experiment, run_name=run.get("name"), tags=tags)
    run_id = created.info.run_id
    ended = "FAILED"
    try:
        params = [Param(k, v) for k, v in sorted(flatten(run.get("spec", {})).items())]
        for i in range(0, len(params), PARAMS_PER_BATCH):
            mlflow.log_batch(run_id, params=params[i : i + PARAMS_PER_BATCH])
        batch: list[Any] = []
        points = 0
        for point in client.metric_points(run["id"]):
            if point["value"] is None:
                continue
            millis = int(float(point["wall_time"]) * 1000)
            batch.append(Metric(point["name"], float(point["value"]), millis, int(point["step"])))
            points += 1
            if len(batch) == METRICS_PER_BATCH:
                mlflow.log_batch(run_id, metrics=batch)
                batch = []
        if batch:
            mlflow.log_batch(run_id, metrics=batch)
        artifact = _log_policy(client, mlflow, run_id, run["id"])
        ended = _STATUS.get(str(run.get("status")), "FINISHED")
    finally:
        # MLflow prints the run's URL to stdout as it ends a run: to stderr here, so that
        # ``--json`` output stays JSON.
        with contextlib.redirect_stdout(sys.stderr):
            mlflow.set_terminated(run_id, status=ended)
    return Logged(run["id"], run_id, mlflow_experiment, len(params), points, artifact)


def _log_policy(client: Client, mlflow: Any, run_id: str, experiment_id: str) -> str | None:
    """The policy-only export of the run's best checkpoint (its latest when none has a return),
    as the artifact ``policy/<id>-step<N>-policy.safetensors``; None when it has no checkpoint."""
    listing = client.checkpoints(experiment_id)
    if not listing:
        return None
    chosen = "best" if any(c.get("best") for c in listing) else "latest"
    with tempfile.TemporaryDirectory(prefix="marlforge-mlflow-") as tmp:
        probe = Path(tmp) / "policy.safetensors"
        try:
            entry = client.export(experiment_id, probe, chosen)
        except ApiError as exc:
            if exc.status == 409:  # a checkpoint with no policy to export
                return None
            raise
        named = probe.with_name(f"{experiment_id}-step{entry['step']}-policy.safetensors")
        probe.rename(named)
        mlflow.log_artifact(run_id, str(named), artifact_path="policy")
        return f"policy/{named.name}"
