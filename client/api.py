"""``Client``: one method per route of the REST API (docs/api.md), answers as the API's JSON.

Every refusal is an ``ApiError`` (``client.transport``); a run's event stream and its checkpoints'
files are ``client.streams``'s methods, which ``Client`` has too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from client.streams import Streams
from client.transport import Json, JsonList

EVAL_RETURN = "eval/episode_return"


class Client(Streams):
    """A client of one MARLForge API (``url``) as one key (``key``, sent as a Bearer token)."""

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
