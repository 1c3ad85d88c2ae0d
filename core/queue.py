"""The job queue: one Celery configuration for the API (sending) and the workers (consuming).

One queue per backend and resource class, so a worker image with only TensorFlow never receives a
PyTorch job, and a run that needs a GPU only reaches a worker that has one:

- ``<prefix><backend>`` (``marlforge.torch``): runs whose spec asks for ``cpu`` or ``auto``, and
  matches (played on the CPU). Every worker of the backend consumes it.
- ``<prefix><backend>-gpu`` (``marlforge.torch-gpu``): runs whose spec asks for ``cuda``. Only GPU
  workers (``marlforge worker --gpu``) consume it, beside the plain queue, and they look at it
  first. Only the backends that can use a GPU (``learners.backends.GPU_BACKENDS``) have one; a
  ``cuda`` spec of another backend goes to its plain queue and fails there with its runtime's
  reason.

``queue_for`` decides a run's queue from its spec; every path that queues a run (submission,
resume, a sweep's scheduler, a takeover after a lost worker) goes through it. Work is acknowledged
late (after the run ends) and prefetched one job at a time; the broker's visibility timeout is
above the longest run, so a slow run is never handed to a second worker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from celery import Celery
from kombu import Exchange, Queue  # type: ignore[attr-defined]

from core.enums import ResourceClass
from core.settings import Settings
from core.streaming import redis_url_of
from learners.api import GPU_BACKENDS, Backend, Device

RUN_TASK = "marlforge.run_experiment"
MATCH_TASK = "marlforge.play_match"
GPU_SUFFIX = "-gpu"


def queue_name(
    settings: Settings, backend: Backend, resource: ResourceClass = ResourceClass.CPU
) -> str:
    """The queue that carries ``backend``'s jobs of the ``resource`` class."""
    suffix = GPU_SUFFIX if resource == ResourceClass.GPU else ""
    return f"{settings.queue_prefix}{Backend(backend).value}{suffix}"


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


def queue_for(settings: Settings, backend: Backend, device: Device) -> str:
    """The queue a run of ``backend`` whose spec asks for ``device`` is sent to: the one function
    that decides it (see the module's docstring)."""
    return queue_name(settings, backend, resource_class(backend, device))


def declared_queues(settings: Settings) -> list[tuple[Backend, ResourceClass, str]]:
    """Every queue of the service: each backend's plain queue and, for a backend that can use a
    GPU, its GPU queue."""
    queues = [(b, ResourceClass.CPU, queue_name(settings, b)) for b in Backend]
    gpu = ResourceClass.GPU
    queues += [(b, gpu, queue_name(settings, b, gpu)) for b in Backend if b in GPU_BACKENDS]
    return queues


def worker_queues(
    settings: Settings, backends: Sequence[Backend], on_gpu: Collection[Backend] = ()
) -> list[str]:
    """The queues a worker of ``backends`` consumes, in the order it looks at them: the GPU queue
    of each backend it runs on a GPU (``on_gpu``) first, then every plain one (a GPU host also
    takes CPU-class work)."""
    gpu = ResourceClass.GPU
    gpu_queues = [queue_name(settings, b, gpu) for b in backends if b in on_gpu]
    return gpu_queues + [queue_name(settings, b) for b in backends]


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
    names = [name for _, _, name in declared_queues(settings)]
    queues = [Queue(n, Exchange(n), n) for n in names]  # type: ignore[no-untyped-call]
    app.conf.update(
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=5,
        task_queues=queues,
        task_default_queue=queue_name(settings, Backend.TORCH),
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

    def enqueue(self, experiment_id: str, backend: Backend, device: Device) -> None:
        """Queue a run of the experiment, whose spec asks for ``device``, on ``queue_for``'s
        queue (only after its row is committed)."""

    def enqueue_match(self, match_id: str, backend: Backend) -> None:
        """Queue a match to be played (only after its row is committed)."""

    def unreachable_reason(self) -> str | None:
        """None when the broker can take messages, else why not."""


class CeleryDispatcher:
    """The dispatcher the service uses: a Celery message on the run's queue (``queue_for``)."""

    def __init__(self, settings: Settings, app: Celery | None = None) -> None:
        self.settings = settings
        self.app = app if app is not None else make_celery(settings)

    def enqueue(self, experiment_id: str, backend: Backend, device: Device) -> None:
        self._send(RUN_TASK, experiment_id, queue_for(self.settings, Backend(backend), device))

    def enqueue_match(self, match_id: str, backend: Backend) -> None:
        # A match plays its policies on the CPU (``learners.policy.load_policy``).
        self._send(MATCH_TASK, match_id, queue_name(self.settings, Backend(backend)))

    def _send(self, task: str, row_id: str, queue: str) -> None:
        self.app.send_task(
            task,
            args=[row_id],
            queue=queue,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
        )

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
    """How many messages wait in each queue (``declared_queues``), as the broker counts them: the
    length of Redis's list of that name (``LLEN``), or the embedded broker's message files of that
    queue. A message a worker has taken (its running job, unacknowledged until the run ends) no
    longer waits. None for a broker this cannot ask; raises when the broker cannot be reached."""
    names = {(backend, klass): name for backend, klass, name in declared_queues(settings)}
    if settings.uses_embedded_broker:
        # kombu's filesystem transport names each message file "<time>_<uuid>.<queue>.msg".
        folder = settings.broker_dir / "queue"
        files = [path.name for path in folder.glob("*.msg")] if folder.is_dir() else []
        return {k: sum(f.endswith(f".{name}.msg") for f in files) for k, name in names.items()}
    url = redis_url_of(settings)
    if url is None:
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        with client.pipeline(transaction=False) as pipe:
            for name in names.values():
                pipe.llen(name)
            lengths = pipe.execute()
    finally:
        client.close()
    return {key: int(length) for key, length in zip(names, lengths, strict=True)}


def _writable(folder: Path) -> bool:
    import os

    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
