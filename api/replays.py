"""Replay GIFs of checkpoints: rendered once by a ``python -m learners.replay`` subprocess, then
served from the artifact storage.

A subprocess, not the API process, because rendering needs the checkpoint's deep-learning
framework and the env's renderer; the API imports neither (and stays small and responsive). The GIF
is cached beside the run's checkpoints under a name holding the checkpoint's SHA-256, so a
checkpoint rewritten at the same step gets a new replay. Concurrent requests for one replay share
one render, which finishes (and is cached) even if the client that asked goes away.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from enum import StrEnum
from pathlib import Path

from core.models import Checkpoint
from core.storage import ArtifactStorage
from learners.replay import EXIT_NOT_INSTALLED

RENDER_TIMEOUT_S = 300.0
# Rendering loads a framework and steps an env; two at once already fill a small machine.
MAX_PARALLEL_RENDERS = 2


class ReplayFailure(StrEnum):
    """Why a replay could not be rendered."""

    FAILED = "failed"
    TIMED_OUT = "timed_out"
    NOT_INSTALLED = "not_installed"
    """This host lacks the checkpoint's framework (an API image built without it)."""


class ReplayError(Exception):
    """A replay could not be rendered."""

    def __init__(self, message: str, failure: ReplayFailure = ReplayFailure.FAILED) -> None:
        super().__init__(message)
        self.failure = failure


class ReplayRenderer:
    """Renders and caches replays for one API process."""

    def __init__(self, storage: ArtifactStorage, timeout_s: float = RENDER_TIMEOUT_S) -> None:
        self.storage = storage
        self.timeout_s = timeout_s
        self._renders: dict[Path, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(MAX_PARALLEL_RENDERS)

    def cached_path(self, checkpoint: Checkpoint) -> Path:
        """Where the replay of ``checkpoint`` is kept."""
        name = f"{checkpoint.id}-{checkpoint.sha256[:16]}.gif"
        return self.storage.resolve(f"experiments/{checkpoint.experiment_id}/replays/{name}")

    async def gif(self, checkpoint: Checkpoint) -> Path:
        """The replay's file, rendering it first if it is not cached yet."""
        out = self.cached_path(checkpoint)
        if out.is_file():
            return out
        task = self._renders.get(out)
        if task is None:
            source = self.storage.resolve(checkpoint.path)
            task = asyncio.create_task(self._render(source, out))
            self._renders[out] = task
            task.add_done_callback(lambda _: self._renders.pop(out, None))
        await asyncio.shield(task)
        return out

    async def _render(self, source: Path, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        temp = out.with_name(f".tmp-{uuid.uuid4().hex}.gif")
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        async with self._slots:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "learners.replay",
                "--checkpoint",
                str(source),
                "--out",
                str(temp),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
            try:
                _, stderr = await asyncio.wait_for(process.communicate(), self.timeout_s)
            except TimeoutError:
                process.kill()
                await process.wait()
                temp.unlink(missing_ok=True)
                raise ReplayError(
                    f"rendering took longer than {self.timeout_s:.0f} s", ReplayFailure.TIMED_OUT
                ) from None
        if process.returncode != 0 or not temp.is_file():
            temp.unlink(missing_ok=True)
            lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
            failure = (
                ReplayFailure.NOT_INSTALLED
                if process.returncode == EXIT_NOT_INSTALLED
                else ReplayFailure.FAILED
            )
            raise ReplayError(
                lines[-1] if lines else f"the renderer exited with {process.returncode}", failure
            )
        os.replace(temp, out)
