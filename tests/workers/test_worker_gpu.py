"""A GPU worker (``marlforge worker --gpu``, ``workers.launch``): it starts only where a framework
of its backends sees a GPU, and says why not otherwise. This host has no GPU, so the refusals run
as the real command in a process of its own; what a GPU host would find is given to
``check_gpus``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from learners.enums import Backend
from workers.launch import REFUSED_EXIT_CODE, Refused, check_gpus

H100 = "NVIDIA H100 80GB HBM3"


def _worker(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``marlforge worker ARGS`` with this session's code and nothing to connect to: a refused
    worker must stop before it reaches the database or the broker."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")}
    environ.update({"MARLFORGE_VAR_DIR": str(tmp_path / "var"), **env})
    return subprocess.run(
        [sys.executable, "-m", "marlforge", "worker", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_gpu_worker_on_a_host_without_a_gpu_refuses_to_start(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the worker would start")

    done = _worker(["--backend", "torch", "--gpu"], tmp_path)

    assert done.returncode == REFUSED_EXIT_CODE, done.stderr
    assert "marlforge worker --gpu: refusing to start" in done.stderr
    assert "the torch backend's framework sees no GPU on this host" in done.stderr
    assert "A GPU host" in done.stderr
    assert "ready" not in done.stdout + done.stderr


def test_a_gpu_worker_of_backends_that_cannot_use_a_gpu_refuses_to_start(tmp_path: Path) -> None:
    # The setting, as the compose file or `marlforge up` would pass it.
    done = _worker(["--backend", "mindspore"], tmp_path, MARLFORGE_WORKER_GPU="true")

    assert done.returncode == REFUSED_EXIT_CODE, done.stderr
    assert "none of its backends (mindspore) can use a GPU" in done.stderr


def test_a_gpu_worker_runs_on_the_gpus_its_frameworks_see() -> None:
    found = {Backend.TORCH: [H100], Backend.TENSORFLOW: []}

    gpus = check_gpus([Backend.TORCH, Backend.TENSORFLOW, Backend.MINDSPORE], found)

    # TensorFlow sees none: that worker takes only TensorFlow's CPU work.
    assert gpus == {Backend.TORCH: [H100]}


def test_a_gpu_worker_whose_frameworks_see_no_gpu_is_refused_with_each_reason() -> None:
    found: dict[Backend, list[str] | str] = {
        Backend.TORCH: [],
        Backend.TENSORFLOW: "ModuleNotFoundError: No module named 'tensorflow'",
    }

    with pytest.raises(Refused) as refused:
        check_gpus([Backend.TORCH, Backend.TENSORFLOW], found)

    assert "the torch backend's framework sees no GPU" in str(refused.value)
    assert "No module named 'tensorflow'" in str(refused.value)
