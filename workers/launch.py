"""``marlforge worker [--backend B ...] [--gpu]``: a Celery worker on its backends' queues.

A plain worker consumes each backend's plain queue (``core.dispatch.queue``). A GPU worker
(``--gpu``, or ``MARLFORGE_WORKER_GPU=true``) consumes the GPU queue of each of its backends that
can use a GPU (``learners.backends.GPU_BACKENDS``) first, then the plain queues: a GPU host also
takes CPU-class work, and a spec with ``auto`` uses the GPU there. Its broker is read in that order
(kombu's ``priority`` queue order), so GPU work waiting is taken before CPU work.

Before it starts, a GPU worker checks that its backends' frameworks see a GPU, and refuses to start
(exit code 2, the reason on stderr) when none does: a GPU worker that could not run a ``cuda`` run
would take them from the queue only to fail them. A worker of several backends consumes the GPU
queue only of those whose framework sees a GPU (it logs the others). The check runs in a short-lived
spawned process: the worker process itself never imports a framework (its runs do, each in a
process of its own: ``workers.supervisor``), so it stays small however many runs it takes.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor

from core.dispatch.queue import worker_queues
from core.settings import Settings
from learners.api import GPU_BACKENDS, Backend, gpu_names

log = logging.getLogger(__name__)

REFUSED_EXIT_CODE = 2
PROBE_TIMEOUT_S = 300.0
"""How long the GPU check may take (importing a framework on a busy host takes seconds)."""
GPU_HOST_DOCS = "docs/deployment.md, 'A GPU host'"


class Refused(Exception):
    """A GPU worker that must not start, and why (for a person)."""


def main(settings: Settings, backends: Sequence[Backend], gpu: bool) -> int:
    """Consume the backends' queues in this process until SIGINT/SIGTERM; 2 when a GPU worker is
    refused (see the module's docstring)."""
    chosen = list(dict.fromkeys(backends)) or list(Backend)
    gpus: dict[Backend, list[str]] = {}
    if gpu:
        try:
            gpus = check_gpus(chosen, probe_gpus(chosen))
        except Refused as exc:
            print(f"marlforge worker --gpu: refusing to start: {exc}", file=sys.stderr, flush=True)
            return REFUSED_EXIT_CODE
        found = "; ".join(f"{b}: {', '.join(names)}" for b, names in gpus.items())
        log.info("GPU worker; the GPUs its backends see: %s", found)
    from workers import presence
    from workers.app import app

    presence.announce(gpus)
    if gpu:
        options = dict(app.conf.broker_transport_options or {})
        app.conf.broker_transport_options = {**options, "queue_order_strategy": "priority"}
    suites = presence.served_suites()
    if not suites:
        print(
            "marlforge worker: refusing to start: it serves no environment suite "
            f"(MARLFORGE_WORKER_SUITES={settings.worker_suites!r} names none this host can build)",
            file=sys.stderr,
            flush=True,
        )
        return REFUSED_EXIT_CODE
    queues = worker_queues(settings, chosen, on_gpu=list(gpus), suites=suites)
    # The solo pool takes one job at a time in this process, which trains it in a child process
    # (workers.supervisor: memory budget, cancel grace) and forwards its SIGTERM there; the run
    # checkpoints and stops.
    app.worker_main(
        [
            "worker",
            "--queues",
            ",".join(queues),
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            settings.log_level.upper(),
            "--hostname",
            f"marlforge-{'-'.join(chosen)}{'-gpu' if gpu else ''}-{os.getpid()}@%h",
        ]
    )
    return 0


def probe_gpus(backends: Sequence[Backend]) -> dict[Backend, list[str] | str]:
    """For each of ``backends`` that can use a GPU, the GPUs its framework sees (by name), or why
    the framework could not be asked (it is not installed...); asked in a spawned process."""
    asked = [b for b in backends if b in GPU_BACKENDS]
    if not asked:
        return {}
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_gpu_names, asked).result(timeout=PROBE_TIMEOUT_S)


def _gpu_names(backends: Sequence[Backend]) -> dict[Backend, list[str] | str]:
    found: dict[Backend, list[str] | str] = {}
    for backend in backends:
        try:
            found[backend] = gpu_names(backend)
        except Exception as exc:  # an import error or a driver error: either way, no GPU here
            found[backend] = f"{type(exc).__name__}: {exc}"
    return found


def check_gpus(
    backends: Sequence[Backend], found: Mapping[Backend, list[str] | str]
) -> dict[Backend, list[str]]:
    """The GPUs of each of ``backends`` whose framework sees one (``found``, from
    ``probe_gpus``); ``Refused`` with the reason when none does. A GPU backend that sees none is
    left out (logged): the worker consumes only its plain queue."""
    usable = [b for b in backends if b in GPU_BACKENDS]
    if not usable:
        raise Refused(
            f"none of its backends ({', '.join(backends)}) can use a GPU (those that can: "
            f"{', '.join(sorted(GPU_BACKENDS))}); start it without --gpu"
        )
    gpus: dict[Backend, list[str]] = {}
    problems = []
    for backend in usable:
        seen = found.get(backend, [])
        if isinstance(seen, str):
            problems.append(f"the {backend} backend could not be loaded to look for one ({seen})")
        elif not seen:
            problems.append(f"the {backend} backend's framework sees no GPU on this host")
        else:
            gpus[backend] = list(seen)
    if not gpus:
        raise Refused(
            f"{'; '.join(problems)}. Start it without --gpu (it then takes CPU work only), or "
            "give it the GPU: the NVIDIA driver, a CUDA build of the framework and, in a "
            f"container, the GPU reserved for it ({GPU_HOST_DOCS})"
        )
    for problem in problems:
        log.warning("GPU worker: %s; it takes only that backend's CPU work", problem)
    return gpus
