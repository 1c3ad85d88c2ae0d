"""A run's metrics as TensorBoard event files (``marlforge export tensorboard``), written with
TensorBoard's own event writer: one folder per run under the target (``<dir>/<experiment id>``),
every point a scalar at its step and wall time, the run's name, algorithm, backend and spec as
text. Points whose value was not finite are left out (the API answers them as null)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.api import Client
from client.transport import Json


@dataclass(frozen=True)
class Written:
    """What ``write_run`` wrote."""

    experiment_id: str
    folder: Path
    points: int
    metrics: int


def _modules() -> tuple[Any, Any, Any, Any]:
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text.metadata import create_summary_metadata
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as exc:  # pragma: no cover - the extra is part of every install here
        raise RuntimeError(
            "TensorBoard is not installed: pip install 'marlforge[tracking]'"
        ) from exc
    return Event, Summary, EventFileWriter, create_summary_metadata


def _text(summary: Any, metadata: Any, tag: str, text: str) -> Any:
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

    tensor = TensorProto(
        dtype=7,  # DT_STRING
        string_val=[text.encode()],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return summary.Value(tag=tag, metadata=metadata, tensor=tensor)


def write_run(client: Client, run: Json, target: Path) -> Written:
    """Write ``run``'s metrics (an experiment as the API gives it) under ``target``."""
    event_cls, summary_cls, writer_cls, text_metadata = _modules()
    folder = target / run["id"]
    folder.mkdir(parents=True, exist_ok=True)
    writer = writer_cls(str(folder))
    points, names = 0, set()
    try:
        about = {k: run.get(k) for k in ("id", "name", "algorithm", "backend", "status")}
        metadata = text_metadata(display_name="", description="")
        values = [
            _text(summary_cls, metadata, "marlforge/run", json.dumps(about)),
            _text(summary_cls, metadata, "marlforge/spec", json.dumps(run.get("spec", {}))),
        ]
        writer.add_event(
            event_cls(step=0, wall_time=time.time(), summary=summary_cls(value=values))
        )
        for point in client.metric_points(run["id"]):
            if point["value"] is None:
                continue
            value = summary_cls.Value(tag=point["name"], simple_value=float(point["value"]))
            event = event_cls(
                step=int(point["step"]),
                wall_time=float(point["wall_time"]),
                summary=summary_cls(value=[value]),
            )
            writer.add_event(event)
            points += 1
            names.add(point["name"])
    finally:
        writer.close()
    return Written(run["id"], folder, points, len(names))
