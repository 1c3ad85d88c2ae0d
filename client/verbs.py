"""The ``marlforge`` client's own verbs, each a function of the parsed arguments to an exit code
(``client.cli`` adds their parsers and runs them): ``login``; a project's experiments, ``submit``,
``ls``, ``show``, ``watch``, ``logs``, ``cancel``, ``resume``, ``download`` and ``export``; the
deployment's ``workers`` and ``envs``. The families ``match`` and ``sweep`` are
``client.matches`` and ``client.sweeps``.

What they print of the server's strings goes through ``client.text.safe``; ``--json`` prints the
API's JSON as it came. The key is never printed.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from client import config, tracking_cli
from client.api import Client
from client.text import safe
from client.transport import Json
from client.watch import Watcher

EXIT_OK, EXIT_NOT_FOUND = 0, 3


class UsageError(Exception):
    """A command line that names something unusable (a spec file that is missing, not JSON)."""


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2), flush=True)


def login(args: argparse.Namespace) -> int:
    """Ask for (or take) the URL and key, check them with ``GET /v1/whoami``, save them."""
    url = args.url or os.environ.get(config.URL_VARIABLE) or ""
    if not url:
        url = input("MARLForge URL [http://127.0.0.1:8000]: ").strip() or "http://127.0.0.1:8000"
    key = args.key or os.environ.get(config.KEY_VARIABLE) or ""
    if not key:
        key = getpass.getpass("API key: ") if sys.stdin.isatty() else sys.stdin.readline()
    credentials = config.Credentials(url.strip().rstrip("/"), key.strip())
    if not credentials.key:
        raise UsageError("no key given")
    with Client(credentials.url, credentials.key) as client:
        me = client.whoami()
    path = config.save(credentials)
    key_info = me["key"]
    print(
        f"logged in to {credentials.url} as key {safe(key_info.get('name'))!r} "
        f"({safe(key_info.get('role'))}) of project {safe(me['project'])!r}; saved to {path}",
        flush=True,
    )
    return EXIT_OK


def submit(client: Client, args: argparse.Namespace) -> int:
    """Submit the spec; print the new id (alone on its line), then watch it if asked."""
    spec = read_spec(args.spec)
    experiment = client.submit(spec, idempotency_key=args.idempotency_key)
    if args.json:
        _print_json(experiment)
    else:
        print(safe(experiment["id"]), flush=True)
        print(f"submitted {safe(experiment['name'])!r}: {experiment['status']}", file=sys.stderr)
    return Watcher(client, experiment["id"], as_json=args.json).run() if args.watch else EXIT_OK


def read_spec(name: str) -> Json:
    """The JSON object of a spec file ('-': stdin); a ``UsageError`` when it is missing or is not
    a JSON object."""
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the spec {name}: {exc.strerror}") from exc
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"the spec {name} is not JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise UsageError(f"the spec {name} must be a JSON object")
    return spec


def ls(client: Client, args: argparse.Namespace) -> int:
    """A table of experiments (or the page's JSON)."""
    page = client.list(
        status=args.status,
        algorithm=args.algorithm,
        backend=args.backend,
        tag=args.tag,
        q=args.name,
        sweep_id=args.sweep,
        limit=args.limit,
    )
    if args.json:
        _print_json(page)
        return EXIT_OK
    rows = [("ID", "NAME", "ALGORITHM", "BACKEND", "STATUS", "STEP", "RETURN")]
    for e in page["items"]:
        progress = e["progress"]
        step = f"{progress['step']}/{progress['total_steps']}"
        rows.append(
            (e["id"], e["name"][:30], e["algorithm"], e["backend"], e["status"], step, _ret(e))
        )
    _table(rows)
    return EXIT_OK


def _table(rows: Sequence[Sequence[str]]) -> None:
    rows = [[safe(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _ret(experiment: Json) -> str:
    latest = experiment.get("latest_metrics") or {}
    point = latest.get("eval/episode_return") or latest.get("train/episode_return")
    return f"{point['value']:.1f}" if point else "-"


def show(client: Client, args: argparse.Namespace) -> int:
    """One experiment: its fields (or its JSON)."""
    e = client.get(args.experiment_id)
    if args.json:
        _print_json(e)
        return EXIT_OK
    progress = e["progress"]
    lines = [
        ("id", e["id"]),
        ("name", e["name"]),
        ("algorithm", f"{e['algorithm']} on {e['backend']}"),
        ("env", f"{e['spec']['env']['suite']}/{e['spec']['env']['id']}"),
        ("status", e["status"] + (f" ({e['status_reason']})" if e.get("status_reason") else "")),
        ("progress", f"{progress['step']}/{progress['total_steps']}"),
        ("return", _ret(e)),
        ("device", e.get("device") or "-"),
        ("created", e["created_at"]),
        ("finished", e.get("finished_at") or "-"),
    ]
    for label, value in lines:
        print(f"{label:<10} {safe(value)}")
    return EXIT_OK


def watch(client: Client, args: argparse.Namespace) -> int:
    """Follow the run; 0 when it succeeds, 1 when it fails or is cancelled."""
    return Watcher(client, args.experiment_id, as_json=args.json).run()


def logs(client: Client, args: argparse.Namespace) -> int:
    """The run's log lines (or their JSON)."""
    entries = client.logs(args.experiment_id)
    if args.json:
        _print_json(entries)
        return EXIT_OK
    for entry in entries:
        step = entry.get("step")
        where = f" step {step}" if step is not None else ""
        line = f"{entry.get('at', '')} {entry['level'].upper()}{where}: {entry['message']}"
        print(safe(line))
    return EXIT_OK


def cancel(client: Client, args: argparse.Namespace) -> int:
    """Cancel; print the new status."""
    return _changed(client.cancel(args.experiment_id), args.json)


def resume(client: Client, args: argparse.Namespace) -> int:
    """Resume; print the new status."""
    return _changed(client.resume(args.experiment_id), args.json)


def _changed(experiment: Json, as_json: bool) -> int:
    if as_json:
        _print_json(experiment)
    else:
        print(safe(f"{experiment['id']} {experiment['status']}"), flush=True)
    return EXIT_OK


def download(client: Client, args: argparse.Namespace) -> int:
    """Download a checkpoint; print where it went and its (checked) sha256."""
    path = args.output
    if path is None:
        listing = client.checkpoints(args.experiment_id)
        step = max((c["step"] for c in listing), default=0)
        chosen = [c for c in listing if c["id"] == args.checkpoint]
        step = chosen[0]["step"] if chosen else step
        path = f"{args.experiment_id}-step{step}.safetensors"
    entry = client.download(args.experiment_id, path, args.checkpoint)
    if args.json:
        _print_json({**entry, "path": str(Path(path).resolve())})
    else:
        where = f"checkpoint {entry['id']} at step {entry['step']}, sha256 {entry['sha256']}"
        print(safe(f"{path}: {where}"))
    return EXIT_OK


def workers(client: Client, args: argparse.Namespace) -> int:
    """A table of the registry's workers, a row per worker and backend (or the API's JSON)."""
    listed = client.workers(
        backend=args.backend, resource_class=args.resource_class, live=True if args.live else None
    )
    if args.json:
        _print_json(listed)
        return EXIT_OK
    rows = [("ID", "HOST", "BACKEND", "CLASS", "GPUS", "LAST SEEN", "STATE")]
    for w in listed["items"]:
        gpus = ", ".join(w["gpus"]) or "-"
        state = "live" if w["live"] else "stale"
        seen = w["last_seen_at"]
        rows.append((w["id"], w["hostname"], w["backend"], w["resource_class"], gpus, seen, state))
    _table(rows)
    return EXIT_OK


def envs(client: Client, args: argparse.Namespace) -> int:
    """A table of the installed suites' env ids: agents, groups, action kinds, algorithms (or the
    API's JSON)."""
    listed = client.environments()
    suites = [s for s in listed["suites"] if args.suite in (None, s["suite"])]
    if args.suite is not None and not suites:
        known = ", ".join(s["suite"] for s in listed["suites"])
        print(f"no environment suite {args.suite!r} (known: {safe(known)})", file=sys.stderr)
        return EXIT_NOT_FOUND
    if args.json:
        _print_json({**listed, "suites": suites})
        return EXIT_OK
    rows = [("SUITE", "ID", "AGENTS", "GROUPS", "ACTIONS", "ALGORITHMS")]
    for suite in suites:
        for env in suite["environments"]:
            groups = ",".join(dict.fromkeys(env["groups"]))
            actions = ",".join(env["action_kinds"])
            algorithms = ",".join(env["algorithms"]) or "-"
            rows.append(
                (suite["suite"], env["id"], str(env["agents"]), groups, actions, algorithms)
            )
    _table(rows)
    return EXIT_OK


def export(client: Client, args: argparse.Namespace) -> int:
    """Download a checkpoint's policy-only export; print where it went and its (checked) sha256.
    ``export tensorboard|mlflow ...``: a run's metrics to those tools (``client.tracking_cli``)."""
    if args.what[0] in tracking_cli.TARGETS:
        return tracking_cli.export(client, args)
    if len(args.what) != 1:
        raise UsageError("export takes one run's id (or tensorboard/mlflow first)")
    args.experiment_id = args.what[0]
    path = args.output
    if path is None:
        listing = client.checkpoints(args.experiment_id)
        if args.checkpoint == "best":
            chosen = [c for c in listing if c.get("best")]
        elif args.checkpoint == "latest":
            chosen = sorted(listing, key=lambda c: c["step"])[-1:]
        else:
            chosen = [c for c in listing if c["id"] == args.checkpoint]
        step = chosen[0]["step"] if chosen else 0
        path = f"{args.experiment_id}-step{step}-policy.{args.format}"
    entry = client.export(args.experiment_id, path, args.checkpoint, args.format)
    if args.json:
        _print_json({**entry, "path": str(Path(path).resolve())})
    else:
        where = (
            f"the policy of checkpoint {entry['id']} at step {entry['step']}, "
            f"{entry['export_bytes']:,} bytes of {entry['size_bytes']:,}, "
            f"sha256 {entry['export_sha256']}"
        )
        print(safe(f"{path}: {where}"))
    return EXIT_OK
