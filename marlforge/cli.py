"""``marlforge``: run the service's processes.

- ``marlforge migrate``: bring the database to the newest schema.
- ``marlforge api``: serve the HTTP API (uvicorn).
- ``marlforge worker [--backend B ...] [--gpu]``: a Celery worker on the backends' queues (all by
  default); ``--gpu``: also their GPU queues, first (``workers.launch``: refused on a host where a
  backend's framework sees no GPU).
- ``marlforge worker-health``: exit 0 when the worker is healthy (its heartbeat file is
  fresh: ``workers.health``), else 1; a container's health check.
- ``marlforge up``: the laptop mode: migrate, then run the API and one worker for every backend as
  child processes (``marlforge.localstack``: a child that dies is started again, and a dead worker's
  runs resume on the new one) until Ctrl-C or SIGTERM, which stops both (the worker checkpoints
  its run first and puts it back in the queue, so the next ``up`` continues it). It prints a
  one-time URL that signs the dashboard in as the local admin key (kept in ``<var>/admin.key``).
- ``marlforge storage init``: create the store's bucket or directory when it is missing.
- ``marlforge storage copy --to URL [--from URL]``: copy every artifact to another store (a
  directory to a bucket), each sha256 verified (``core.storage.copy``).
- ``marlforge compact``: compact the runs whose retention has passed (``core.retention``; the API
  also does it every ``MARLFORGE_RETENTION_INTERVAL_S``).
- ``marlforge keys create --project NAME --role ROLE [--name LABEL]``, ``keys list [--project]``,
  ``keys revoke ID``: manage API keys (``create`` prints the new key alone on its last line).
- ``marlforge login``, ``submit``, ``ls``, ``show``, ``watch``, ``logs``, ``cancel``, ``resume``,
  ``download``: a researcher's verbs over the REST API (``client.cli``, docs/client.md).

This module is the composition root: the one place that imports ``api``, ``workers``, ``core`` and
``client`` together (each imported where its command needs it, so a client verb starts without the
server's packages).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from core.enums import Role
from learners.api import Backend

if TYPE_CHECKING:  # imported where used: the client verbs start without SQLAlchemy or settings
    from core.settings import Settings

log = logging.getLogger("marlforge")


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def cmd_migrate(settings: Settings, revision: str) -> int:
    """Upgrade the database to ``revision``."""
    from core import migrate

    migrate.upgrade(settings.database_url, revision)
    log.info("database at %s is at revision %s", _redact(settings.database_url), revision)
    return 0


def cmd_api(settings: Settings, host: str, port: int) -> int:
    """Serve the API in this process until SIGINT/SIGTERM; the app's lifespan runs its
    background loops beside it (``api.background``: the reaper, compactor, purger and sweep
    scheduler)."""
    import uvicorn

    from api.app import create_app

    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        access_log=False,
        # Event streams never end by themselves: on shutdown, give other requests this long,
        # then close the streams (their clients reconnect elsewhere with Last-Event-ID).
        timeout_graceful_shutdown=10,
    )
    return 0


def cmd_storage_init(settings: Settings) -> int:
    """Create the store's bucket or directory when it is missing, and say what was done."""
    from core.storage import StoreError, store_for

    store = store_for(settings)
    try:
        print(f"{store.url}: {store.create()}", flush=True)
    except StoreError as exc:
        print(f"{store.url}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def cmd_storage_copy(settings: Settings, source_url: str | None, destination_url: str) -> int:
    """Copy every artifact to another store, verifying each sha256 (``core.storage.copy``);
    exit 1 when an object could not be copied."""
    from core.db import make_engine, make_session_factory
    from core.storage import open_store
    from core.storage.copy import copy_store

    def store(url: str) -> Any:
        endpoint = settings.s3_endpoint_url or None
        return open_store(url, cache_dir=settings.var_dir / "cache", endpoint_url=endpoint)

    source = store(source_url or settings.artifacts_url)
    destination = store(destination_url)
    engine = make_engine(settings.database_url)
    try:
        report = copy_store(source, destination, make_session_factory(engine))
    finally:
        engine.dispose()
    for problem in report.problems:
        print(f"not copied: {problem}", flush=True)
    print(
        f"copied {len(report.copied)} object(s) ({report.bytes_copied:,} bytes) from "
        f"{source.url} to {destination.url}, each sha256 verified; {len(report.already_there)} "
        f"already there; {len(report.problems)} not copied",
        flush=True,
    )
    return 1 if report.problems else 0


def cmd_compact(settings: Settings) -> int:
    """Compact every run whose retention has passed, now (``core.retention.service``)."""
    from core.db import make_engine, make_session_factory
    from core.retention.service import compact

    if settings.retention_days == 0:
        print("compaction is off (MARLFORGE_RETENTION_DAYS is 0)", flush=True)
        return 0
    engine = make_engine(settings.database_url)
    try:
        report = compact(make_session_factory(engine), settings)
    finally:
        engine.dispose()
    print(
        f"compacted {len(report.compacted)} run(s): {report.events_deleted} events and "
        f"{report.points_deleted} metric points deleted",
        flush=True,
    )
    return 0


def cmd_worker(settings: Settings, backends: Sequence[Backend], gpu: bool) -> int:
    """Consume the backends' queues in this process until SIGINT/SIGTERM; with ``gpu`` (or
    ``MARLFORGE_WORKER_GPU``) their GPU queues first, after checking that the host has a GPU
    (``workers.launch``)."""
    from workers.launch import main

    return main(settings, backends, gpu or settings.worker_gpu)


def cmd_worker_health(settings: Settings) -> int:
    """0 when the worker's heartbeat file is fresh, else 1 (``workers.health``)."""
    from workers.health import main

    return main(settings)


def cmd_up(settings: Settings, host: str, port: int) -> int:
    """Migrate, start the API and one worker, and stop both on Ctrl-C/SIGTERM."""
    from core.auth import cli as keys_cli
    from marlforge.localstack import LocalStack

    settings.var_dir.mkdir(parents=True, exist_ok=True)
    cmd_migrate(settings, "head")
    if settings.uses_embedded_broker:
        _requeue_orphans(settings)
    login_url = keys_cli.local_login_url(settings, host, port)
    stack = LocalStack(settings, host, port)
    stack.start()
    log.info("MARLForge is up: API on http://%s:%d (Ctrl-C stops it)", host, port)
    # Printed, not logged: the URL signs a browser in once (as Jupyter's token URL does).
    print(f"Open the dashboard, signed in as the local admin:\n    {login_url}", flush=True)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    exit_code = stack.watch(stop)
    if not stack.stop():
        exit_code = 1
    return exit_code


def _requeue_orphans(settings: Settings) -> None:
    from core.db import make_engine, make_session_factory
    from core.dispatch.queue import CeleryDispatcher
    from core.experiments import service as experiments

    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            requeued = experiments.requeue_orphans(session, CeleryDispatcher(settings))
    finally:
        engine.dispose()
    if requeued:
        log.info("requeued %d run(s) interrupted by the last shutdown", len(requeued))


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(prog="marlforge", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("up", "migrate, then run the API and a local worker"),
        ("api", "serve the HTTP API"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("--host", default=None, help="interface (MARLFORGE_API_HOST)")
        command.add_argument("--port", type=int, default=None, help="port (MARLFORGE_API_PORT)")
    worker = sub.add_parser("worker", help="run a Celery worker")
    worker.add_argument(
        "--backend",
        action="append",
        type=Backend,
        choices=list(Backend),
        default=[],
        help="consume this backend's queue (repeatable; all backends when omitted)",
    )
    worker.add_argument(
        "--gpu",
        action="store_true",
        help="a GPU worker: also consume the backends' GPU queues (runs asking for cuda), first; "
        "refuses to start where a backend sees no GPU (MARLFORGE_WORKER_GPU)",
    )
    sub.add_parser("worker-health", help="exit 0 when the worker's heartbeat is fresh, else 1")
    sub.add_parser("compact", help="compact the runs whose retention has passed")
    storage = sub.add_parser("storage", help="manage the artifact store")
    verbs = storage.add_subparsers(dest="verb", required=True)
    verbs.add_parser("init", help="create the store's bucket or directory if it is missing")
    copy = verbs.add_parser("copy", help="copy every artifact to another store, verified")
    copy.add_argument(
        "--to", required=True, help="the destination: file:///path or s3://bucket/prefix"
    )
    copy.add_argument(
        "--from", dest="source", default=None, help="the source (MARLFORGE_ARTIFACTS_URL)"
    )
    migrate = sub.add_parser("migrate", help="upgrade the database schema")
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    _add_keys_parser(sub)
    from client import cli as client_cli  # the REST client, imported only by this command line

    client_cli.add_parsers(sub)
    return parser


def _add_keys_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = sub.add_parser("keys", help="create, list and revoke API keys")
    verbs = keys.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create a key (and its project when new)")
    create.add_argument("--project", required=True, help="the project's name")
    create.add_argument("--role", required=True, type=Role, choices=list(Role))
    create.add_argument("--name", default=None, help="a label for people")
    listing = verbs.add_parser("list", help="list keys")
    listing.add_argument("--project", default=None, help="only this project's keys")
    revoke = verbs.add_parser("revoke", help="revoke a key")
    revoke.add_argument("key_id", metavar="ID", help="the key's id (from 'keys list')")


def cmd_keys(settings: Settings, args: argparse.Namespace) -> int:
    """``marlforge keys VERB``."""
    from core.auth import cli as keys_cli

    if args.verb == "create":
        return keys_cli.keys_create(settings, args.project, args.role, args.name)
    if args.verb == "list":
        return keys_cli.keys_list(settings, args.project)
    return keys_cli.keys_revoke(settings, args.key_id)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``marlforge`` console script."""
    args = build_parser().parse_args(argv)
    from client import cli as client_cli

    if args.command in client_cli.VERBS:  # a client of some server: no settings of this host
        return client_cli.run(args)
    from core.settings import get_settings

    settings = get_settings()
    _configure_logging(settings)
    if args.command == "migrate":
        return cmd_migrate(settings, args.revision)
    if args.command == "worker":
        return cmd_worker(settings, args.backend, args.gpu)
    if args.command == "worker-health":
        return cmd_worker_health(settings)
    if args.command == "keys":
        return cmd_keys(settings, args)
    if args.command == "compact":
        return cmd_compact(settings)
    if args.command == "storage" and args.verb == "init":
        return cmd_storage_init(settings)
    if args.command == "storage":
        return cmd_storage_copy(settings, args.source, args.to)
    host = args.host or settings.api_host
    port = args.port or settings.api_port
    if args.command == "api":
        return cmd_api(settings, host, port)
    return cmd_up(settings, host, port)


if __name__ == "__main__":
    sys.exit(main())
