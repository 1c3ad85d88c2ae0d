"""The ``marlforge`` verbs of a researcher's machine, over the REST API (``client.api``): their
parsers and the dispatch. ``login``, ``submit``, ``ls``, ``show``, ``watch``, ``logs``, ``cancel``,
``resume``, ``download``, ``export``, ``workers`` and ``envs`` are ``client.verbs``'s functions,
``match ...`` and ``sweep ...`` the families ``client.matches`` and ``client.sweeps``.

``marlforge.cli`` adds these parsers (``add_parsers``) and hands their arguments to ``run``. Exit
codes (docs/client.md): 0 ok; 1 the run failed or was cancelled, or the API refused the request; 2 a
usage error (argparse's, or a spec file that is missing or not JSON); 3 not found; 4 no credentials,
or the server refused the key (401/403); 5 the server cannot be reached. The key is never printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from client import config, matches, sweeps, tracking_cli, verbs
from client.api import Client
from client.text import safe
from client.transport import ApiError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH, EXIT_UNREACHABLE = 0, 1, 2, 3, 4, 5
STATUSES = ("pending", "queued", "running", "cancelling", "succeeded", "failed", "cancelled")
Verb = Callable[[Client, argparse.Namespace], int]

VERBS = (
    "login", "submit", "ls", "show", "watch", "logs", "cancel", "resume", "download", "export",
    "workers", "envs", "match", "sweep",
)  # fmt: skip


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
    matches.add_parser(sub, verbs.read_spec, _json_flag)
    sweeps.add_parser(sub, verbs.read_spec, _json_flag)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


def run(args: argparse.Namespace) -> int:
    """Run one client verb; its exit code."""
    try:
        if args.command == "login":
            return verbs.login(args)
        credentials = config.load()
        with Client(credentials.url, credentials.key) as client:
            return VERB_FUNCTIONS[args.command](client, args)
    except config.MissingCredentials as exc:
        return _fail(str(exc), EXIT_AUTH)
    except (verbs.UsageError, tracking_cli.TrackingUsage) as exc:
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


VERB_FUNCTIONS: dict[str, Verb] = {
    "submit": verbs.submit,
    "ls": verbs.ls,
    "show": verbs.show,
    "watch": verbs.watch,
    "logs": verbs.logs,
    "cancel": verbs.cancel,
    "resume": verbs.resume,
    "download": verbs.download,
    "export": verbs.export,
    "workers": verbs.workers,
    "envs": verbs.envs,
    "match": matches.run,
    "sweep": sweeps.run,
}
