"""The ``marlforge`` verbs of a researcher's machine, over the REST API (``client.api``):
``login``, ``submit``, ``ls``, ``show``, ``watch``, ``logs``, ``cancel``, ``resume``, ``download``,
``export``, ``workers``, ``match ...`` (``client.matches``) and ``sweep ...`` (``client.sweeps``).

``marlforge.cli`` adds these parsers (``add_parsers``) and hands their arguments to ``run``. Exit
codes (docs/client.md): 0 ok; 1 the run failed or was cancelled, or the API refused the request; 2 a
usage error (argparse's, or a spec file that is missing or not JSON); 3 not found; 4 no credentials,
or the server refused the key (401/403); 5 the server cannot be reached. The key is never printed.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from client import config, matches, sweeps, tracking_cli
from client.api import ApiError, Client, Json
from client.text import safe
from client.watch import Watcher

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH, EXIT_UNREACHABLE = 0, 1, 2, 3, 4, 5
STATUSES = ("pending", "queued", "running", "cancelling", "succeeded", "failed", "cancelled")
Verb = Callable[[Client, argparse.Namespace], int]

VERBS = (
    "login", "submit", "ls", "show", "watch", "logs", "cancel", "resume", "download", "export",
    "workers", "envs", "match", "sweep",
)  # fmt: skip


class UsageError(Exception):
    """A command line that names something unusable (a spec file that is missing, not JSON)."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the client verbs to ``marlforge``'s subcommands."""
    login = sub.add_parser("login", help="save the server URL and an API key, checked first")
    login.add_argument("--url", default=None, help="the API's URL (asked when left out)")
    login.add_argument(
        "--key", default=None, help="the key (asked without echo, or read from stdin if piped)"
    )
    submit = sub.add_parser("submit", help="submit an experiment spec (a JSON file)")
    submit.add_argument("spec", metavar="SPEC.json", help="the spec file ('-': stdin)")
    submit.add_argument("--watch", action="store_true", help="then watch it until it ends")
    submit.add_argument("--idempotency-key", default=None, help="retry-safe submission key")
    _json_flag(submit)
    ls = sub.add_parser("ls", help="list the project's experiments, newest first")
    ls.add_argument("--status", choices=STATUSES, default=None)
    ls.add_argument("--algorithm", default=None)
    ls.add_argument("--backend", default=None)
    ls.add_argument("--tag", default=None)
    ls.add_argument("--name", default=None, help="names containing this text")
    ls.add_argument("--sweep", default=None, metavar="ID", help="the runs of this sweep")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (1-500)")
    _json_flag(ls)
    for name, text in (
        ("show", "show one experiment"),
        ("watch", "follow a run live until it ends (exit 0: succeeded)"),
        ("logs", "print a run's log"),
        ("cancel", "cancel a queued or running experiment"),
        ("resume", "resume a cancelled or failed experiment"),
    ):
        verb = sub.add_parser(name, help=text)
        verb.add_argument("experiment_id", metavar="ID")
        _json_flag(verb)
    download = sub.add_parser("download", help="download a checkpoint, sha256 checked")
    download.add_argument("experiment_id", metavar="ID")
    download.add_argument("--checkpoint", default="latest", help="its id (default: latest)")
    download.add_argument("-o", "--output", default=None, help="the file to write")
    _json_flag(download)
    export = sub.add_parser(
        "export", help="download a checkpoint's policy alone (docs/using-results.md)"
    )
    export.add_argument(
        "what",
        nargs="+",
        metavar="ID | tensorboard [ID ...] DIR | mlflow [ID ...]",
        help="a run's id (its policy), or where its metrics go: TensorBoard event files under "
        "DIR, or an MLflow tracking server",
    )
    export.add_argument(
        "--sweep", default=None, metavar="ID", help="tensorboard, mlflow: every run of this sweep"
    )
    export.add_argument(
        "--tracking-uri",
        default=None,
        help="mlflow: the tracking server (default: $MLFLOW_TRACKING_URI)",
    )
    export.add_argument(
        "--experiment",
        default="marlforge",
        help="mlflow: the MLflow experiment to log into (made if missing)",
    )
    export.add_argument(
        "--checkpoint", default="latest", help="best, latest (the default) or a checkpoint's id"
    )
    export.add_argument(
        "--format",
        default="safetensors",
        choices=("safetensors", "onnx"),
        help="safetensors (the policy's tensors and their layout) or onnx (an ONNX model)",
    )
    export.add_argument("-o", "--output", default=None, help="the file to write")
    _json_flag(export)
    workers = sub.add_parser("workers", help="list the deployment's workers (shared by projects)")
    workers.add_argument("--backend", default=None)
    workers.add_argument("--resource-class", choices=("cpu", "gpu"), default=None)
    workers.add_argument("--live", action="store_true", help="only the live ones")
    _json_flag(workers)
    envs = sub.add_parser("envs", help="list the environment suites and ids a spec may name")
    envs.add_argument("--suite", default=None, help="only this suite")
    _json_flag(envs)
    matches.add_parser(sub, _read_spec, _json_flag)
    sweeps.add_parser(sub, _read_spec, _json_flag)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


def run(args: argparse.Namespace) -> int:
    """Run one client verb; its exit code."""
    try:
        if args.command == "login":
            return login(args)
        credentials = config.load()
        with Client(credentials.url, credentials.key) as client:
            return VERB_FUNCTIONS[args.command](client, args)
    except config.MissingCredentials as exc:
        return _fail(str(exc), EXIT_AUTH)
    except (UsageError, tracking_cli.TrackingUsage) as exc:
        return _fail(str(exc), EXIT_USAGE)
    except ApiError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return 130


def report(exc: ApiError) -> int:
    """Print an API error on stderr (with each bad field) and return its exit code."""
    message = str(exc)
    if exc.status in (401, 403):
        hint = "run 'marlforge login' or set MARLFORGE_API_KEY"
        message = f"the server refused the key: {message}; {hint}"
    lines = [f"error: {message}", *(f"  {f.field}: {f.reason}" for f in exc.fields)]
    lines = [safe(line) for line in lines]
    print("\n".join(lines), file=sys.stderr, flush=True)
    if exc.status == 404:
        return EXIT_NOT_FOUND
    if exc.status in (401, 403):
        return EXIT_AUTH
    return EXIT_UNREACHABLE if exc.status == 0 and exc.code == "unreachable" else EXIT_FAILED


def _fail(message: str, code: int) -> int:
    print(f"error: {safe(message)}", file=sys.stderr, flush=True)
    return code


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
    spec = _read_spec(args.spec)
    experiment = client.submit(spec, idempotency_key=args.idempotency_key)
    if args.json:
        _print_json(experiment)
    else:
        print(safe(experiment["id"]), flush=True)
        print(f"submitted {safe(experiment['name'])!r}: {experiment['status']}", file=sys.stderr)
    return Watcher(client, experiment["id"], as_json=args.json).run() if args.watch else EXIT_OK


def _read_spec(name: str) -> Json:
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


VERB_FUNCTIONS: dict[str, Verb] = {
    "submit": submit,
    "ls": ls,
    "show": show,
    "watch": watch,
    "logs": logs,
    "cancel": cancel,
    "resume": resume,
    "download": download,
    "export": export,
    "workers": workers,
    "envs": envs,
    "match": matches.run,
    "sweep": sweeps.run,
}
