"""``Client``: one method per route of the REST API (docs/api.md), answers as the API's JSON.

Every refusal, from the API (its error body: ``code``, ``message``, ``fields``) or from the way
there (an unreachable server, a download whose sha256 is wrong), is one exception type,
``ApiError``, so a script catches one thing and branches on ``status`` and ``code``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from client.sse import SseParser

Json = dict[str, Any]
JsonList = list[Json]

# Answers the client follows itself: a presigned download URL of the artifact store.
REDIRECTS = {301, 302, 303, 307, 308}
CHUNK = 1 << 20
EVAL_RETURN = "eval/episode_return"


@dataclass(frozen=True)
class FieldError:
    """One bad field of a request: its dotted path (``hyperparameters.tau``) and why."""

    field: str
    reason: str


@dataclass
class ApiError(Exception):
    """A request that did not succeed. ``status`` is the HTTP status (0: no answer at all);
    ``code`` the API's stable error code (``invalid_spec``, ``not_found``...) or the client's own
    (``unreachable``, ``checksum_mismatch``, ``bad_response``)."""

    status: int
    code: str
    message: str
    fields: list[FieldError] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.message} ({self.status} {self.code})" if self.status else self.message


@dataclass(frozen=True)
class Event:
    """One event of a run's stream: ``id`` (None for ``end``), ``kind`` and ``data``."""

    id: int | None
    kind: str
    data: Json


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()["error"]
        fields = [FieldError(f["field"], f["reason"]) for f in body.get("fields") or []]
        return ApiError(response.status_code, body["code"], body["message"], fields)
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200] or response.reason_phrase
        message = f"HTTP {response.status_code}: {text}"
        return ApiError(response.status_code, "bad_response", message)


class Client:
    """A client of one MARLForge API (``url``) as one key (``key``, sent as a Bearer token)."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = 30,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._transport = transport
        self._http = httpx.Client(
            base_url=self.url,
            headers={"authorization": f"Bearer {key}", "user-agent": "marlforge-client"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __repr__(self) -> str:  # never shows the key
        return f"Client({self.url!r})"

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise _error(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Json:
        body: Json = self._request(method, path, **kwargs).json()
        return body

    def whoami(self) -> Json:
        """The key's project and role (``GET /v1/whoami``)."""
        return self._json("GET", "/v1/whoami")

    def submit(self, spec: Json, idempotency_key: str | None = None) -> Json:
        """Submit a spec; the new (or, with a reused ``idempotency_key``, the first) experiment."""
        headers = {"idempotency-key": idempotency_key} if idempotency_key is not None else {}
        return self._json("POST", "/v1/experiments", json=spec, headers=headers)

    def list(
        self,
        *,
        status: str | None = None,
        algorithm: str | None = None,
        backend: str | None = None,
        tag: str | None = None,
        q: str | None = None,
        sweep_id: str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Json:
        """One page of the project's experiments (of one sweep, with ``sweep_id``), newest first:
        ``{"items", "next_after"}``."""
        filters = {"status": status, "algorithm": algorithm, "backend": backend, "tag": tag}
        rest = {"q": q, "sweep_id": sweep_id, "after": after}
        params = {k: v for k, v in {**filters, **rest}.items() if v is not None}
        return self._json("GET", "/v1/experiments", params={**params, "limit": limit})

    def workers(
        self,
        *,
        backend: str | None = None,
        resource_class: str | None = None,
        live: bool | None = None,
    ) -> Json:
        """The registry of workers, shared by all projects: ``{"items", "stale_after_s"}``, each
        item with ``live``; ``live=True`` only the live ones (``GET /v1/workers``)."""
        filters = {"backend": backend, "resource_class": resource_class}
        params: dict[str, str] = {k: v for k, v in filters.items() if v is not None}
        if live is not None:
            params["live"] = "true" if live else "false"
        return self._json("GET", "/v1/workers", params=params)

    def environments(self) -> Json:
        """The installed environment suites and their ids (``GET /v1/environments``)."""
        return self._json("GET", "/v1/environments")

    def get(self, experiment_id: str) -> Json:
        """One experiment."""
        return self._json("GET", f"/v1/experiments/{experiment_id}")

    def cancel(self, experiment_id: str) -> Json:
        """Cancel a queued or running experiment."""
        return self._json("POST", f"/v1/experiments/{experiment_id}/cancel")

    def resume(self, experiment_id: str) -> Json:
        """Queue a cancelled or failed experiment again, from its latest checkpoint."""
        return self._json("POST", f"/v1/experiments/{experiment_id}/resume")

    def metric_points(self, experiment_id: str) -> Iterator[Json]:
        """Every metric point of a run, ``{step, wall_time, name, value}`` (``value`` None where
        it was not finite), by step then name, read page by page."""
        after: int | None = None
        while True:
            params: dict[str, Any] = {"limit": 10000}
            if after is not None:
                params["after_step"] = after
            page = self._json("GET", f"/v1/experiments/{experiment_id}/metrics", params=params)
            yield from page["items"]
            after = page["next_after_step"]
            if after is None:
                return

    def sweep_runs(self, sweep_id: str) -> JsonList:
        """Every run of a sweep (``list(sweep_id=...)``, all pages), oldest first."""
        runs: JsonList = []
        after: str | None = None
        while True:
            page = self.list(sweep_id=sweep_id, limit=500, after=after)
            runs.extend(page["items"])
            after = page["next_after"]
            if after is None:
                return runs[::-1]

    def act(
        self,
        experiment_id: str,
        observations: Any,
        checkpoint_id: str = "latest",
        action_masks: Json | None = None,
        memory: Any = None,
    ) -> Json:
        """The greedy actions of a checkpoint's policy (``checkpoint_id``: its id, ``best`` or
        ``latest``) for ``observations`` (per-agent dict or array, JSON values; NumPy arrays are
        turned into lists), with a recurrent policy's ``memory`` as the last answer gave it
        (``POST .../checkpoints/{cid}/act``): ``{"actions": ..., "memory": ...}``."""
        body: dict[str, Any] = {"observations": _lists(observations)}
        if action_masks is not None:
            body["action_masks"] = _lists(action_masks)
        if memory is not None:
            body["memory"] = _lists(memory)
        url = f"/v1/experiments/{experiment_id}/checkpoints/{checkpoint_id}/act"
        return self._json("POST", url, json=body)

    def submit_match(self, match: Json) -> Json:
        """Start a match (``POST /v1/matches``): one team's policy against another's."""
        return self._json("POST", "/v1/matches", json=match)

    def matches(self, *, status: str | None = None, limit: int = 50) -> Json:
        """One page of the project's matches, newest first: ``{"items", "next_after"}``."""
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status
        return self._json("GET", "/v1/matches", params=params)

    def match(self, match_id: str) -> Json:
        """One match, with its result once played."""
        return self._json("GET", f"/v1/matches/{match_id}")

    def cancel_match(self, match_id: str) -> Json:
        """Withdraw a queued or playing match; the match, now ``cancelled``."""
        return self._json("POST", f"/v1/matches/{match_id}/cancel")

    def submit_sweep(self, sweep: Json, idempotency_key: str | None = None) -> Json:
        """Submit a sweep (``POST /v1/sweeps``): a base spec over a search space × seeds; the new
        (or, with a reused ``idempotency_key``, the first) sweep."""
        headers = {"idempotency-key": idempotency_key} if idempotency_key is not None else {}
        return self._json("POST", "/v1/sweeps", json=sweep, headers=headers)

    def sweeps(self, *, limit: int = 50, after: str | None = None) -> Json:
        """One page of the project's sweeps, newest first: ``{"items", "next_after"}``."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        return self._json("GET", "/v1/sweeps", params=params)

    def sweep(self, sweep_id: str) -> Json:
        """One sweep: its status, its runs' counts by status and their progress together."""
        return self._json("GET", f"/v1/sweeps/{sweep_id}")

    def cancel_sweep(self, sweep_id: str) -> Json:
        """Cancel every run of the sweep that has not ended; the sweep."""
        return self._json("POST", f"/v1/sweeps/{sweep_id}/cancel")

    def resume_sweep(self, sweep_id: str) -> Json:
        """Put every cancelled or failed run of the sweep back to ``pending``; the sweep."""
        return self._json("POST", f"/v1/sweeps/{sweep_id}/resume")

    def sweep_summary(self, sweep_id: str, metric: str = EVAL_RETURN) -> Json:
        """The sweep's configurations ranked by the IQM of their runs' final ``metric``, with
        bootstrap intervals, P(best > each) and mean curves."""
        return self._json("GET", f"/v1/sweeps/{sweep_id}/summary", params={"metric": metric})

    def sweep_summary_csv(self, sweep_id: str, metric: str = EVAL_RETURN) -> str:
        """``sweep_summary``'s ranked table as the server's CSV, one row per configuration."""
        path = f"/v1/sweeps/{sweep_id}/summary.csv"
        return self._request("GET", path, params={"metric": metric}).text

    def checkpoints(self, experiment_id: str) -> JsonList:
        """The kept checkpoints, oldest first (``id``, ``step``, ``size_bytes``, ``sha256``)."""
        items: JsonList = self._json("GET", f"/v1/experiments/{experiment_id}/checkpoints")["items"]
        return items

    def event_page(
        self, experiment_id: str, after: int = 0, kinds: str | None = None, limit: int = 500
    ) -> Json:
        """One page of the run's events (``?format=json``): ``items``, ``next_after``, ``more``,
        ``status``, ``finished``."""
        params: Json = {"format": "json", "after": after, "limit": limit}
        if kinds is not None:
            params["kinds"] = kinds
        return self._json("GET", f"/v1/experiments/{experiment_id}/events", params=params)

    def logs(self, experiment_id: str) -> JsonList:
        """Every ``log`` event of the run so far (``level``, ``message``, ``step``, ``at``)."""
        entries: JsonList = []
        after = 0
        while True:
            page = self.event_page(experiment_id, after, kinds="log", limit=5000)
            entries.extend(item["data"] for item in page["items"])
            after = page["next_after"]
            if not page["more"]:
                return entries

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
                    raise _error(response)
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
                    digest = _save(response, partial)
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

    def _fetch(self, url: str, partial: Path) -> str:
        try:
            with self._http.stream("GET", url) as response:
                if response.status_code in REDIRECTS:
                    # The store's presigned URL carries its own authority: our key stays here.
                    location = response.headers["location"]
                    with (
                        httpx.Client(
                            timeout=self._http.timeout, transport=self._transport
                        ) as store,
                        store.stream("GET", location) as redirected,
                    ):
                        return _save(redirected, partial)
                return _save(response, partial)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"the download broke: {exc}") from exc


def _pick(listing: list[Json], experiment_id: str, checkpoint_id: str | None) -> Json:
    if not listing:
        raise ApiError(404, "not_found", f"experiment {experiment_id} has no checkpoint yet")
    if checkpoint_id in (None, "latest"):
        return max(listing, key=lambda c: c["step"])
    for entry in listing:
        if entry["id"] == checkpoint_id:
            return entry
    raise ApiError(404, "not_found", f"no checkpoint {checkpoint_id!r} in {experiment_id}")


def _save(response: httpx.Response, partial: Path) -> str:
    if response.status_code >= 400:
        response.read()
        raise _error(response)
    sha = hashlib.sha256()
    with partial.open("wb") as out:
        for chunk in response.iter_bytes(CHUNK):
            sha.update(chunk)
            out.write(chunk)
    return sha.hexdigest()


def _lists(value: Any) -> Any:
    """``value`` as JSON values: arrays (anything with ``tolist``) as lists, dicts and lists
    walked."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value
