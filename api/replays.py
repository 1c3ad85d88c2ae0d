"""Replay GIFs of checkpoints: rendered once by a ``python -m learners.replay`` subprocess, then
served from the artifact storage.

A subprocess, not the API process, because rendering needs the checkpoint's deep-learning
framework and the env's renderer; the API imports neither (and stays small and responsive). The
checkpoint is fetched from the store into this host's cache (checked against its sha256), and the
GIF is put in the store beside the run's checkpoints under a name holding the checkpoint's SHA-256,
so a checkpoint rewritten at the same step gets a new replay. Concurrent requests for one replay
share one render, which finishes (and is stored) even if the client that asked goes away.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from enum import StrEnum
from pathlib import Path

from core.models import Checkpoint
from core.storage import (
    ArtifactStore,
    ObjectCorrupt,
    ObjectMissing,
    StoreError,
    replay_key,
    verified_copy,
)
from learners.api import EXIT_NOT_INSTALLED

RENDER_TIMEOUT_S = 300.0
# Rendering loads a framework and steps an env; two at once already fill a small machine.
MAX_PARALLEL_RENDERS = 2


class ReplayFailure(StrEnum):
    """Why a replay could not be rendered."""

    FAILED = "failed"
    TIMED_OUT = "timed_out"
    NOT_INSTALLED = "not_installed"
    """This host lacks the checkpoint's framework (an API image built without it)."""
    MISSING = "missing"
    """The checkpoint's file is not in the artifact storage."""
    CORRUPT = "corrupt"
    """The checkpoint's file does not match its recorded sha256."""
    UNAVAILABLE = "unavailable"
    """The artifact storage cannot be reached."""


class ReplayError(Exception):
    """A replay could not be rendered."""

    def __init__(self, message: str, failure: ReplayFailure = ReplayFailure.FAILED) -> None:
        super().__init__(message)
        self.failure = failure


class ReplayRenderer:
    """Renders and stores replays for one API process."""

    def __init__(self, storage: ArtifactStore, timeout_s: float = RENDER_TIMEOUT_S) -> None:
        self.storage = storage
        self.timeout_s = timeout_s
        self._renders: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(MAX_PARALLEL_RENDERS)

    async def gif(self, checkpoint: Checkpoint) -> str:
        """The key of the replay of ``checkpoint``, rendering it first if it is not stored yet."""
        key = replay_key(checkpoint.experiment_id, checkpoint.id, checkpoint.sha256)
        if await asyncio.to_thread(self._stored, key):
            return key
        task = self._renders.get(key)
        if task is None:
            task = asyncio.create_task(self._render(checkpoint, key))
            self._renders[key] = task
            task.add_done_callback(lambda _: self._renders.pop(key, None))
        await asyncio.shield(task)
        return key

    def _stored(self, key: str) -> bool:
        try:
            return self.storage.stat(key) is not None
        except StoreError as exc:
            raise ReplayError(str(exc), ReplayFailure.UNAVAILABLE) from None

    async def _render(self, checkpoint: Checkpoint, key: str) -> None:
        work = self.storage.cache_dir / "replays"
        work.mkdir(parents=True, exist_ok=True)
        name = uuid.uuid4().hex
        source, temp = work / f"{name}.ckpt", work / f"{name}.gif"

        def copy_gif(out: Path) -> None:
            shutil.copyfile(temp, out)

        try:
            await asyncio.to_thread(self._fetch, checkpoint, source)
            await self._run_renderer(source, temp)
            await asyncio.to_thread(self.storage.put, key, copy_gif)
        except StoreError as exc:
            raise ReplayError(str(exc), ReplayFailure.UNAVAILABLE) from None
        finally:
            source.unlink(missing_ok=True)
            temp.unlink(missing_ok=True)

    def _fetch(self, checkpoint: Checkpoint, source: Path) -> None:
        try:
            verified_copy(self.storage, checkpoint.path, checkpoint.sha256, source)
        except ObjectMissing:
            raise ReplayError(
                "its file is missing from the artifact storage", ReplayFailure.MISSING
            ) from None
        except ObjectCorrupt:
            raise ReplayError(
                "its file does not match its recorded sha256", ReplayFailure.CORRUPT
            ) from None

    async def _run_renderer(self, source: Path, temp: Path) -> None:
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
                raise ReplayError(
                    f"rendering took longer than {self.timeout_s:.0f} s", ReplayFailure.TIMED_OUT
                ) from None
        if process.returncode != 0 or not temp.is_file():
            lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
            failure = (
                ReplayFailure.NOT_INSTALLED
                if process.returncode == EXIT_NOT_INSTALLED
                else ReplayFailure.FAILED
            )
            raise ReplayError(
                lines[-1] if lines else f"the renderer exited with {process.returncode}", failure
            )
