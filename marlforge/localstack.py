"""``marlforge up``'s supervisor: the API and one local worker as child processes, kept running.

A child that dies is started again, so one bad run (or a worker killed by the kernel's OOM killer)
never takes the local service down. When the worker dies, the runs it held are queued again at
once (``core.leases.service.release_worker``: their leases end now instead of lapsing a minute
later) and the new worker resumes them from their latest checkpoint, counted against their
``max_restarts``. Each worker gets a name of its own (``<host>-up<pid>-w<n>``), so a new worker
never inherits an old one's leases. A child that dies ``CRASH_LOOP_STARTS`` times within
``CRASH_LOOP_WINDOW_S`` is not started again: the supervisor stops the rest and exits 1, rather than
spin.

Ctrl-C or SIGTERM stops every child: SIGTERM, then a kill after ``shutdown_grace_s`` (the worker
checkpoints its run and puts it back in the queue first, so the next ``up`` continues it).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from core.settings import Settings

log = logging.getLogger("marlforge")

CRASH_LOOP_STARTS = 5
CRASH_LOOP_WINDOW_S = 60.0


@dataclass
class _Child:
    """One supervised process: ``marlforge <args>``."""

    name: str
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    worker_id: str | None = None
    """The ``MARLFORGE_WORKER_NAME`` it was started with (workers only)."""
    starts: deque[float] = field(default_factory=lambda: deque(maxlen=CRASH_LOOP_STARTS))


class LocalStack:
    """The API and a worker for every backend, supervised (see the module's docstring)."""

    def __init__(self, settings: Settings, host: str, port: int) -> None:
        self.settings = settings
        # The laptop stack serves the interactive API docs unless told not to (MARLFORGE_API_DOCS).
        self.env = {
            "MARLFORGE_API_DOCS": "true",
            **os.environ,
            "MARLFORGE_VAR_DIR": str(settings.var_dir),
        }
        self.children = [
            _Child("api", ["api", "--host", host, "--port", str(port)]),
            _Child("worker", ["worker"]),
        ]
        self._worker_starts = 0

    def start(self) -> None:
        for child in self.children:
            self._start(child)

    def watch(self, stop: threading.Event) -> int:
        """Restart dead children until ``stop`` is set; 1 when a child crash-looped, else 0."""
        while not stop.wait(0.5):
            for child in self.children:
                assert child.process is not None
                if child.process.poll() is None:
                    continue
                code = child.process.returncode
                if self._crash_looping(child):
                    log.error(
                        "%s exited (code %s) %d times within %.0f s; stopping the rest",
                        child.name, code, CRASH_LOOP_STARTS, CRASH_LOOP_WINDOW_S,
                    )  # fmt: skip
                    return 1
                log.error("%s exited unexpectedly (code %s); starting it again", child.name, code)
                if child.worker_id is not None:
                    self._release(child.worker_id)
                self._start(child)
        return 0

    def stop(self) -> bool:
        """SIGTERM every child and kill those still running after the grace; True when every
        child stopped cleanly."""
        live = [c for c in self.children if c.process is not None]
        for child in live:
            assert child.process is not None
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        clean = True
        for child in live:
            assert child.process is not None
            clean = (
                _wait_stopped(child.name, child.process, self.settings.shutdown_grace_s) and clean
            )
        return clean

    def _start(self, child: _Child) -> None:
        env = dict(self.env)
        if child.name == "worker":
            self._worker_starts += 1
            child.worker_id = f"{socket.gethostname()}-up{os.getpid()}-w{self._worker_starts}"
            env["MARLFORGE_WORKER_NAME"] = child.worker_id
        child.starts.append(time.monotonic())
        child.process = _spawn(child.args, env)

    @staticmethod
    def _crash_looping(child: _Child) -> bool:
        starts = child.starts
        full = len(starts) == CRASH_LOOP_STARTS
        return full and time.monotonic() - starts[0] < CRASH_LOOP_WINDOW_S

    def _release(self, worker_id: str) -> None:
        """Queue the dead worker's runs again now (their checkpoints are on this machine)."""
        from core.db import make_engine, make_session_factory
        from core.dispatch.queue import CeleryDispatcher
        from core.leases import service as leases

        engine = make_engine(self.settings.database_url)
        try:
            factory = make_session_factory(engine)
            done = leases.release_worker(factory, CeleryDispatcher(self.settings), worker_id)
        except Exception:  # the new worker must start whatever happens; the reaper retries
            log.exception("could not release the runs of worker %s", worker_id)
            return
        finally:
            engine.dispose()
        for takeover in done:
            log.warning("experiment %s: %s", takeover.experiment_id, takeover.reason)


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A new session keeps the terminal's Ctrl-C away from the children: this process decides how
    # they stop. PR_SET_PDEATHSIG makes them stop too if this process is killed outright.
    return subprocess.Popen(
        [sys.executable, "-m", "marlforge", *args],
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _wait_stopped(name: str, process: subprocess.Popen[bytes], grace_s: float) -> bool:
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop within %.0f s; killing it", name, grace_s)
        process.kill()
        process.wait()
    # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully.
    stopped_cleanly = process.returncode in (0, -signal.SIGTERM)
    how = "cleanly" if stopped_cleanly else f"with exit code {process.returncode}"
    log.info("%s stopped %s", name, how)
    return stopped_cleanly
