"""``marlforge export tensorboard [ID ...] DIR`` and ``marlforge export mlflow [ID ...]`` (both
with ``--sweep ID``): runs' metrics into the tools researchers keep their work in
(``client.to_tensorboard``, ``client.to_mlflow``; docs/using-results.md)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from client.api import Client
from client.transport import Json

TARGETS = ("tensorboard", "mlflow")
EXIT_OK = 0


class TrackingUsage(ValueError):
    """A command line that does not say what to export or where."""


def _runs(client: Client, ids: list[str], sweep: str | None) -> list[Json]:
    runs = [client.get(i) for i in ids]
    if sweep is not None:
        runs += client.sweep_runs(sweep)
    if not runs:
        raise TrackingUsage("name at least one run's id, or --sweep ID")
    return runs


def export(client: Client, args: argparse.Namespace) -> int:
    """Export the runs the command line names; print a line (or JSON) per run."""
    target, rest = args.what[0], args.what[1:]
    done: list[Json] = []
    if target == "tensorboard":
        from client.to_tensorboard import write_run

        if not rest:
            raise TrackingUsage("export tensorboard needs the folder to write: ... DIR")
        folder, ids = rest[-1], rest[:-1]
        for run in _runs(client, ids, args.sweep):
            written = write_run(client, run, Path(folder))
            done.append(
                {
                    "id": run["id"],
                    "folder": str(written.folder),
                    "points": written.points,
                    "metrics": written.metrics,
                }
            )
            if not args.json:
                print(
                    f"{run['id']}: {written.points:,} points of {written.metrics} metrics -> "
                    f"{written.folder}"
                )
    else:
        from client.to_mlflow import log_run

        uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            raise TrackingUsage("export mlflow needs --tracking-uri (or MLFLOW_TRACKING_URI)")
        for run in _runs(client, rest, args.sweep):
            logged = log_run(client, run, uri, args.experiment)
            done.append(
                {
                    "id": run["id"],
                    "mlflow_run_id": logged.mlflow_run_id,
                    "mlflow_experiment_id": logged.mlflow_experiment_id,
                    "params": logged.params,
                    "points": logged.points,
                    "artifact": logged.artifact,
                }
            )
            if not args.json:
                print(
                    f"{run['id']}: MLflow run {logged.mlflow_run_id} ({logged.params} params, "
                    f"{logged.points:,} points, artifact {logged.artifact or 'none'})"
                )
    if args.json:
        print(json.dumps(done, indent=2), flush=True)
    return EXIT_OK
