"""A resumed run lets go of its checkpoint once the learner, the buffer and the generators hold
what they need of it. Otherwise a run with a large replay buffer holds it twice (the buffer, and
the checkpoint's copy of its rows) for the whole run: memory the submission-time estimate does not
count and the worker's memory guard kills for.

Measured, not mocked: each backend resumes a real checkpoint whose replay holds 200,000 rows
(MADDPG on simple_spread, ~100 MiB), and once the run is under way the test asks whether any
array ``checkpoint.read`` returned (or the memory under it, which a view would keep alive) is
still alive, and how much memory the run's allocations hold (tracemalloc counts NumPy's arrays
and the buffers safetensors reads into; not the frameworks' own allocations)."""

from __future__ import annotations

import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from learners import checkpoint
from learners.admission.parse import parse_spec
from learners.backends import prepare_backend
from learners.enums import Algorithm, Backend
from learners.hooks import MemoryHooks
from learners.registry import built_pairs
from learners.spec import ExperimentSpec
from learners.training import train

ROWS = 200_000
CHECKPOINT_STEP = 200


def maddpg_spec(backend: Backend, total_steps: int, learning_starts: int) -> ExperimentSpec:
    """MADDPG on two copies of simple_spread with a replay buffer of ``ROWS`` rows."""
    return parse_spec(
        {
            "name": "resume-memory",
            "algorithm": Algorithm.MADDPG,
            "backend": backend,
            "env": {
                "suite": "mpe",
                "id": "simple_spread_v3",
                "num_envs": 2,
                "kwargs": {"continuous_actions": True},
            },
            "total_steps": total_steps,
            "seed": 3,
            "device": "cpu",
            "hyperparameters": {
                "hidden_sizes": [32, 32],
                "batch_size": 32,
                "learning_starts": learning_starts,
                "buffer_size": ROWS,
            },
            "evaluation": {"every_steps": 1000, "episodes": 2},
            "checkpoint": {"every_steps": CHECKPOINT_STEP},
        }
    )


def memory_of(array: NDArray[Any]) -> object:
    """What owns ``array``'s memory: the end of its ``base`` chain (a view keeps it alive too)."""
    owner: object = array
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner


@pytest.fixture(scope="module")
def large_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A PyTorch run's checkpoint at ``CHECKPOINT_STEP`` (after updates: Adam's moments are in
    it) with its replay rows repeated to ``ROWS`` (stepping the env that often would take
    minutes), and the bytes of that replay. Every backend resumes it: checkpoints are portable."""
    directory = tmp_path_factory.mktemp("resume-memory")
    hooks = MemoryHooks(directory)
    train(maddpg_spec(Backend.TORCH, CHECKPOINT_STEP, learning_starts=100), hooks)
    _, path = hooks.checkpoints[-1]
    assert path is not None
    tensors, manifest = checkpoint.read(path)
    for name in [n for n in tensors if n.startswith("replay/") and n != "replay/position"]:
        tensors[name] = np.resize(tensors[name], (ROWS, *tensors[name].shape[1:]))
    tensors["replay/position"] = np.array(0, np.int64)
    large = directory / "large.safetensors"
    checkpoint.write(large, tensors, manifest)
    return large, sum(v.nbytes for n, v in tensors.items() if n.startswith("replay/"))


class Watch(MemoryHooks):
    """Hooks that look, at the run's first ``should_stop`` (the runner has loaded the checkpoint
    by then), at which of ``loaded`` are still alive and at the memory the run holds."""

    def __init__(self, loaded: dict[str, weakref.ref[object]]) -> None:
        super().__init__()
        self.loaded = loaded
        self.alive: list[str] = []
        self.held_bytes = 0

    def should_stop(self) -> bool:
        if self.stop_checks == 0:
            self.alive = sorted(name for name, ref in self.loaded.items() if ref() is not None)
            self.held_bytes = tracemalloc.get_traced_memory()[0]
        return super().should_stop()


@pytest.mark.parametrize("backend", [b for a, b in built_pairs() if a == Algorithm.MADDPG])
def test_a_resumed_run_holds_no_copy_of_its_checkpoint(
    backend: Backend, large_checkpoint: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learner's and the buffer's loads copy what they keep, and nothing else keeps the
    checkpoint's arrays. The resumed run makes no update (``learning_starts`` is past its end):
    what is checked happens before its first step, and an update would only add compile time."""
    path, replay_bytes = large_checkpoint
    assert replay_bytes > 64 * 2**20
    loaded: dict[str, weakref.ref[object]] = {}
    read = checkpoint.read

    def read_and_watch(path: Path | str) -> tuple[checkpoint.Tensors, checkpoint.Manifest]:
        tensors, manifest = read(path)
        loaded.update((name, weakref.ref(memory_of(array))) for name, array in tensors.items())
        return tensors, manifest

    monkeypatch.setattr(checkpoint, "read", read_and_watch)
    hooks = Watch(loaded)
    prepare_backend(backend, seed=0)  # the framework's import is not the run's to hold
    tracemalloc.start()
    try:
        train(
            maddpg_spec(backend, CHECKPOINT_STEP + 10, learning_starts=1000),
            hooks,
            resume_from=path,
        )
    finally:
        tracemalloc.stop()
    assert hooks.checkpoints[-1][0] == CHECKPOINT_STEP + 10 and "replay/obs" in loaded
    assert hooks.alive == [], "the run still holds these arrays of the checkpoint it resumed from"
    # The buffer (allocated at its capacity, ROWS rows) and little else; the checkpoint's copy of
    # the rows would make it about twice the replay.
    assert hooks.held_bytes < 1.25 * replay_bytes, (hooks.held_bytes, replay_bytes)
