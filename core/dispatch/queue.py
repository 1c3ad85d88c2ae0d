"""The job queue: one Celery configuration for the API (sending) and the workers (consuming).

One queue per backend, resource class and environment suite, so a worker image with only
TensorFlow never receives a PyTorch job, a run that needs a GPU only reaches a worker that has one,
and a run of a suite only reaches a worker that serves it (``MARLFORGE_WORKER_SUITES``):

- ``<prefix><backend>.<suite>`` (``marlforge.torch.mpe``): runs of the suite whose spec asks for
  ``cpu`` or ``auto``, and matches (played on the CPU). Every worker of the backend that serves the
  suite consumes it.
- ``<prefix><backend>-gpu.<suite>`` (``marlforge.torch-gpu.mpe``): runs whose spec asks for
  ``cuda``. Only GPU workers (``marlforge worker --gpu``) consume it, beside the plain queue, and
  they look at it first. Only the backends that can use a GPU (``learners.backends.GPU_BACKENDS``)
  have one; a ``cuda`` spec of another backend goes to its plain queue and fails there with its
  runtime's reason.

The suites are those installed where the process runs (``learners.api.suite_names``): the API
sends only specs its installed suites admit. ``<prefix><backend>[-gpu]`` alone names a backend's
family of queues (the label of the monitoring gauges).

``queue_for`` decides a run's queue from its spec; every path that queues a run (submission,
resume, a sweep's scheduler, a takeover after a lost worker, the reconciler) goes through it, and
records the name on the run (``experiments.queue``). A message is a claim on its queue: the worker
that takes it starts the queue's fairest queued run (``core.dispatch.fair_share``), which may be
another run than the message names. Work
is acknowledged late (after the run ends) and prefetched one job at a time; the broker's visibility
timeout is above the longest run, so a slow run is never handed to a second worker.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from celery import Celery
from kombu import Exchange, Queue  # type: ignore[attr-defined]

from core.enums import ResourceClass
from core.settings import Settings
from core.streaming import redis_url_of
from learners.api import GPU_BACKENDS, Backend, Device, suite_names

RUN_TASK = "marlforge.run_experiment"
MATCH_TASK = "marlforge.play_match"
GPU_SUFFIX = "-gpu"


class Route(NamedTuple):
    """One queue of the service and what it carries."""

    backend: Backend
    resource: ResourceClass
    suite: str
    name: str


def queue_name(
    settings: Settings,
    backend: Backend,
    resource: ResourceClass = ResourceClass.CPU,
    suite: str | None = None,
) -> str:
    """The queue that carries ``backend``'s jobs of the ``resource`` class for the environment
    ``suite``; without a suite, the name of that family of queues."""
    suffix = GPU_SUFFIX if resource == ResourceClass.GPU else ""
    family = f"{settings.queue_prefix}{Backend(backend).value}{suffix}"
    return family if suite is None else f"{family}.{suite}"


def resource_class(backend: Backend, device: Device) -> ResourceClass:
    """The class of worker a run of ``backend`` asking for ``device`` needs: ``gpu`` for ``cuda``
    on a backend that can use a GPU, else ``cpu``."""
    if Device(device) == Device.CUDA and Backend(backend) in GPU_BACKENDS:
        return ResourceClass.GPU
    return ResourceClass.CPU


def requested_device(spec: Mapping[str, Any]) -> Device:
    """The ``device`` a stored spec asks for (``auto`` when it names none or none known)."""
    try:
        return Device(spec.get("device", Device.AUTO))
    except ValueError:
        return Device.AUTO


def requested_suite(spec: Mapping[str, Any]) -> str:
    """The environment suite a stored spec names (``gymnasium`` for one that names none)."""
    env = spec.get("env")
    suite = env.get("suite") if isinstance(env, Mapping) else None
    return suite if isinstance(suite, str) and suite else "gymnasium"


def queue_for(settings: Settings, backend: Backend, device: Device, suite: str) -> str:
    """The queue a run of ``backend`` on the environment ``suite`` whose spec asks for ``device``
    is sent to: the one function that decides it (see the module's docstring)."""
    return queue_name(settings, backend, resource_class(backend, device), suite)


def declared_queues(settings: Settings, suites: Sequence[str] | None = None) -> list[Route]:
    """Every queue of the service: for each suite (``suites``, else every installed one), each
    backend's plain queue and, for a backend that can use a GPU, its GPU queue."""
    names = suite_names() if suites is None else tuple(suites)
    cpu, gpu = ResourceClass.CPU, ResourceClass.GPU
    routes = [Route(b, cpu, s, queue_name(settings, b, cpu, s)) for b in Backend for s in names]
    routes += [
        Route(b, gpu, s, queue_name(settings, b, gpu, s))
        for b in Backend
        if b in GPU_BACKENDS
        for s in names
    ]
    return routes


def worker_queues(
    settings: Settings,
    backends: Sequence[Backend],
    on_gpu: Collection[Backend] = (),
    suites: Sequence[str] | None = None,
) -> list[str]:
    """The queues a worker of ``backends`` serving ``suites`` (else every installed one) consumes,
    in the order it looks at them: the GPU queues of each backend it runs on a GPU (``on_gpu``)
    first, then every plain one (a GPU host also takes CPU-class work)."""
    names = suite_names() if suites is None else tuple(suites)
    gpu = ResourceClass.GPU
    gpu_queues = [queue_name(settings, b, gpu, s) for b in backends if b in on_gpu for s in names]
    return gpu_queues + [
        queue_name(settings, b, ResourceClass.CPU, s) for b in backends for s in names
    ]


def _embedded_folders(settings: Settings) -> dict[str, str]:
    base = settings.broker_dir
    folders = {"queue": base / "queue", "control": base / "control"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {
        # One folder for both directions: the API writes where the worker reads.
        "data_folder_in": str(folders["queue"]),
        "data_folder_out": str(folders["queue"]),
        "control_folder": str(folders["control"]),
    }


def make_celery(settings: Settings) -> Celery:
    """The Celery app for these settings (broker, queues, delivery guarantees)."""
    app = Celery("marlforge", broker=settings.broker_url, set_as_current=False)
    transport_options: dict[str, object] = {"visibility_timeout": settings.visibility_timeout_s}
    if settings.uses_embedded_broker:
        transport_options.update(_embedded_folders(settings))
    # kombu ships no type hints. A direct exchange per queue, named like it: the queue name is
    # the routing key, so a message reaches exactly its queue.
    names = [route.name for route in declared_queues(settings)]
    queues = [Queue(n, Exchange(n), n) for n in names]  # type: ignore[no-untyped-call]
    app.conf.update(
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=5,
        task_queues=queues,
        task_default_queue=names[0],
        task_create_missing_queues=False,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    return app


class Dispatcher(Protocol):
    """Hands a stored experiment to the workers of its backend."""

    def queue_of(self, backend: Backend, device: Device, suite: str) -> str:
        """The queue ``enqueue`` sends such a run to (recorded on the run:
        ``core.dispatch.fair_share``)."""

    def enqueue(self, experiment_id: str, backend: Backend, device: Device, suite: str) -> None:
        """Queue a run of the experiment, whose spec asks for ``device`` on an environment of
        ``suite``, on ``queue_for``'s queue (only after its row is committed)."""

    def enqueue_match(self, match_id: str, backend: Backend, suite: str) -> None:
        """Queue a match on ``suite``'s environment to be played (only after its row is
        committed)."""

    def unreachable_reason(self) -> str | None:
        """None when the broker can take messages, else why not."""

    def held_messages(self) -> dict[str, set[str]] | None:
        """The row ids the broker holds a message for, by task (``held_messages``); None when it
        cannot tell; raises when the broker cannot be reached."""


class CeleryDispatcher:
    """The dispatcher the service uses: a Celery message on the run's queue (``queue_for``)."""

    def __init__(self, settings: Settings, app: Celery | None = None) -> None:
        self.settings = settings
        self.app = app if app is not None else make_celery(settings)

    def queue_of(self, backend: Backend, device: Device, suite: str) -> str:
        return queue_for(self.settings, Backend(backend), device, suite)

    def enqueue(self, experiment_id: str, backend: Backend, device: Device, suite: str) -> None:
        self._send(RUN_TASK, experiment_id, self.queue_of(backend, device, suite))

    def enqueue_match(self, match_id: str, backend: Backend, suite: str) -> None:
        # A match plays its policies on the CPU (``learners.policy.load_policy``).
        queue = queue_name(self.settings, Backend(backend), ResourceClass.CPU, suite)
        self._send(MATCH_TASK, match_id, queue)

    def _send(self, task: str, row_id: str, queue: str) -> None:
        self.app.send_task(
            task,
            args=[row_id],
            queue=queue,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
        )

    def held_messages(self) -> dict[str, set[str]] | None:
        return held_messages(self.settings)

    def unreachable_reason(self) -> str | None:
        if self.settings.uses_embedded_broker:
            folder = Path(_embedded_folders(self.settings)["data_folder_in"])
            return None if _writable(folder) else f"the broker folder {folder} is not writable"
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=3)
                connection.default_channel.client.ping()
        except Exception as exc:  # any failure means "not ready"; the reason goes to the caller
            return f"broker unreachable: {exc}"
        return None


def waiting_messages(settings: Settings) -> dict[tuple[Backend, ResourceClass], int] | None:
    """How many messages wait in each backend's queues of each resource class, over every suite
    (``declared_queues``), as the broker counts them: the length of Redis's list of each queue
    (``LLEN``), or the embedded broker's message files of that queue. A message a worker has taken
    (its running job, unacknowledged until the run ends) no longer waits. None for a broker this
    cannot ask; raises when the broker cannot be reached."""
    routes = declared_queues(settings)
    counts = {(r.backend, r.resource): 0 for r in routes}
    if settings.uses_embedded_broker:
        # kombu's filesystem transport names each message file "<time>_<uuid>.<queue>.msg".
        folder = settings.broker_dir / "queue"
        files = [path.name for path in folder.glob("*.msg")] if folder.is_dir() else []
        for route in routes:
            counts[route.backend, route.resource] += sum(
                f.endswith(f".{route.name}.msg") for f in files
            )
        return counts
    url = redis_url_of(settings)
    if url is None:
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        with client.pipeline(transaction=False) as pipe:
            for route in routes:
                pipe.llen(route.name)
            lengths = pipe.execute()
    finally:
        client.close()
    for route, length in zip(routes, lengths, strict=True):
        counts[route.backend, route.resource] += int(length)
    return counts


UNACKED_KEY = "unacked"
"""kombu's Redis hash of the messages workers have taken and not yet acknowledged."""


def held_runs(settings: Settings) -> set[str] | None:
    """The experiment ids the broker holds a run message for (``held_messages``)."""
    held = held_messages(settings)
    return None if held is None else held[RUN_TASK]


def held_messages(settings: Settings) -> dict[str, set[str]] | None:
    """The row ids the broker holds a message for, by task (``RUN_TASK``: experiment ids,
    ``MATCH_TASK``: match ids): waiting in any of the service's queues (``declared_queues``), or
    taken by a worker and not yet acknowledged (kombu's ``unacked`` hash on Redis). None for a
    broker this cannot read; raises when it cannot be reached. The embedded broker's taken
    messages are no longer in its folder: a row just taken is told apart by its age
    (``core.dispatch.reconcile``)."""
    payloads: list[bytes | str | dict[str, Any]] = []
    if settings.uses_embedded_broker:
        folder = settings.broker_dir / "queue"
        for path in folder.glob("*.msg") if folder.is_dir() else []:
            try:
                payloads.append(path.read_bytes())
            except OSError:  # taken by a worker since the folder was listed
                continue
        return _by_task(payloads)
    url = redis_url_of(settings)
    if url is None:
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    try:
        with client.pipeline(transaction=False) as pipe:
            for route in declared_queues(settings):
                pipe.lrange(route.name, 0, -1)
            pipe.hvals(UNACKED_KEY)
            *waiting, taken = pipe.execute()
    finally:
        client.close()
    payloads = [raw for raws in waiting for raw in raws]
    for raw in taken:  # [payload, exchange, routing key]
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, list) and entry and isinstance(entry[0], dict):
            payloads.append(entry[0])
    return _by_task(payloads)


def _by_task(payloads: Sequence[bytes | str | dict[str, Any]]) -> dict[str, set[str]]:
    held: dict[str, set[str]] = {RUN_TASK: set(), MATCH_TASK: set()}
    for payload in payloads:
        found = _row_of(payload)
        if found is not None and found[0] in held:
            held[found[0]].add(found[1])
    return held


def _row_of(payload: bytes | str | dict[str, Any]) -> tuple[str, str] | None:
    """The task and row id of a kombu message (its body is base64 JSON ``[args, kwargs,
    embed]``, the row id its one argument), else None."""
    try:
        message = payload if isinstance(payload, dict) else json.loads(payload)
        task = message.get("headers", {}).get("task")
        body = json.loads(base64.b64decode(message["body"]))
        row = body[0][0]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return (task, row) if isinstance(task, str) and isinstance(row, str) else None


def _writable(folder: Path) -> bool:
    import os

    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
