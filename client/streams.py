"""What a run streams to the client: its events (``events``, ``watch``: SSE, reconnecting with
``Last-Event-ID``) and its checkpoints' files (``download``, ``export``), under
``client.api.Client``'s methods.

A file is hashed as it is written to a hidden ``.NAME.part`` file beside the target, which is
renamed only when the sha256 matches: the file appears only once whole and verified.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from client.sse import SseParser
from client.transport import ApiError, Connection, Json, JsonList, error_of, save


@dataclass(frozen=True)
class Event:
    """One event of a run's stream: ``id`` (None for ``end``), ``kind`` and ``data``."""

    id: int | None
    kind: str
    data: Json


class Streams(Connection):
    """A run's event stream and its checkpoints' files."""

    def checkpoints(self, experiment_id: str) -> JsonList:
        """The kept checkpoints, oldest first (``id``, ``step``, ``size_bytes``, ``sha256``)."""
        items: JsonList = self._json("GET", f"/v1/experiments/{experiment_id}/checkpoints")["items"]
        return items

    def events(
        self, experiment_id: str, after: int | None = None, kinds: str | None = None
    ) -> Iterator[Event]:
        """The run's events over one SSE connection: its history after ``after``, then live,
        ending with the ``end`` event. A dropped connection raises ``ApiError`` (``unreachable``);
        ``watch`` reconnects instead."""
        headers = {"accept": "text/event-stream"}
        if after is not None:
            headers["last-event-id"] = str(after)
        params = {"kinds": kinds} if kinds is not None else {}
        path = f"/v1/experiments/{experiment_id}/events"
        parser = SseParser()
        try:
            with self._http.stream(
                "GET", path, headers=headers, params=params, timeout=httpx.Timeout(30, read=60)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_of(response)
                for raw in parser.events(response.iter_lines()):
                    event_id = int(raw.id) if raw.id and raw.kind != "end" else None
                    yield Event(event_id, raw.kind, json.loads("\n".join(raw.data)))
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"the event stream broke: {exc}") from exc

    def watch(
        self,
        experiment_id: str,
        after: int | None = None,
        kinds: str | None = None,
        reconnects: int = 30,
    ) -> Iterator[Event]:
        """Like ``events``, but a dropped stream is reopened with ``Last-Event-ID`` (the id of the
        last event seen), so every event arrives once, until ``end``; after ``reconnects`` failed
        attempts in a row the last error is raised."""
        failures = 0
        while True:
            try:
                for event in self.events(experiment_id, after, kinds):
                    failures = 0
                    if event.id is not None:
                        after = event.id
                    yield event
                    if event.kind == "end":
                        return
                # Closed without ``end``: an API process shutting down; another one answers.
                error = ApiError(0, "unreachable", "the event stream closed before the run ended")
            except ApiError as exc:
                if exc.status != 0:
                    raise
                error = exc
            failures += 1
            if failures > reconnects:
                raise error
            time.sleep(min(2.0, 0.25 * failures))

    def download(
        self, experiment_id: str, path: str | os.PathLike[str], checkpoint_id: str | None = None
    ) -> Json:
        """Stream a checkpoint (``checkpoint_id``; None or ``latest``: the newest) to ``path`` and
        check its sha256 against the listing; returns the listing's entry. The file appears only
        once whole and verified. A presigned redirect of the store is followed without the key."""
        listing = self.checkpoints(experiment_id)
        entry = _pick(listing, experiment_id, checkpoint_id)
        url = f"/v1/experiments/{experiment_id}/checkpoints/{entry['id']}/file"
        target = Path(path)
        partial = target.with_name(f".{target.name}.part")
        try:
            digest = self._fetch(url, partial)
            if digest != entry["sha256"]:
                raise ApiError(
                    0,
                    "checksum_mismatch",
                    f"the download's sha256 {digest} is not the listed {entry['sha256']}",
                )
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return entry

    def export(
        self,
        experiment_id: str,
        path: str | os.PathLike[str],
        checkpoint_id: str | None = None,
        format: str = "safetensors",  # noqa: A002 (the route's query parameter)
    ) -> Json:
        """Stream the policy-only export of a checkpoint (``checkpoint_id``: its id, ``best``, or
        None or ``latest`` for the newest) to ``path``, checked against the export's sha256 (its
        ``ETag``); returns the checkpoint's listing entry with ``export_sha256`` and
        ``export_bytes``. The file appears only once whole and verified."""
        listing = self.checkpoints(experiment_id)
        if checkpoint_id == "best":
            best = [c for c in listing if c.get("best")]
            if not best:
                raise ApiError(
                    404, "not_found", f"{experiment_id} has no checkpoint with an evaluation return"
                )
            entry = best[0]
        else:
            entry = _pick(listing, experiment_id, checkpoint_id)
        url = f"/v1/experiments/{experiment_id}/checkpoints/{entry['id']}/export"
        target = Path(path)
        partial = target.with_name(f".{target.name}.part")
        try:
            try:
                with self._http.stream("GET", url, params={"format": format}) as response:
                    digest = save(response, partial)
                    announced = response.headers.get("etag", "").strip('"')
            except httpx.TransportError as exc:
                raise ApiError(0, "unreachable", f"the export broke off: {exc}") from exc
            if digest != announced:
                raise ApiError(
                    0, "checksum_mismatch", f"the export's sha256 {digest} is not {announced}"
                )
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return {**entry, "export_sha256": digest, "export_bytes": target.stat().st_size}


def _pick(listing: list[Json], experiment_id: str, checkpoint_id: str | None) -> Json:
    if not listing:
        raise ApiError(404, "not_found", f"experiment {experiment_id} has no checkpoint yet")
    if checkpoint_id in (None, "latest"):
        return max(listing, key=lambda c: c["step"])
    for entry in listing:
        if entry["id"] == checkpoint_id:
            return entry
    raise ApiError(404, "not_found", f"no checkpoint {checkpoint_id!r} in {experiment_id}")
