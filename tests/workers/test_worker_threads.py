"""The worker's cap on the frameworks' CPU threads (``MARLFORGE_WORKER_THREADS``): the variables it
sets, which of them it keeps, and that a worker process really starts PyTorch with the cap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.settings import Settings
from workers.threads import THREAD_VARIABLES, limit_threads, thread_environment

ROOT = Path(__file__).resolve().parents[2]

# What a worker process does when it starts (Celery sends ``worker_init`` before it consumes),
# then what its first job would do: import PyTorch.
_STARTED_WORKER = """
import json, os
from celery.signals import worker_init
import workers.app
worker_init.send(sender=None)
import torch
print(json.dumps({"torch": torch.get_num_threads(),
                  "env": {k: os.environ.get(k) for k in %r}}))
"""


def _start_worker(tmp_path: Path, **variables: str) -> dict[str, object]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MARLFORGE_") and k not in THREAD_VARIABLES
    }
    env.update({"MARLFORGE_VAR_DIR": str(tmp_path / "var"), **variables})
    code = _STARTED_WORKER % (list(THREAD_VARIABLES),)
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    started: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return started


def test_one_value_caps_every_framework() -> None:
    variables = thread_environment(4)

    assert variables == dict.fromkeys(THREAD_VARIABLES, "4")
    assert {"OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"} <= set(variables)
    assert {"MARLFORGE_CPU_THREADS", "MARLFORGE_MINDSPORE_THREADS"} <= set(variables)


def test_fewer_than_one_thread_is_refused() -> None:
    environ = {"PATH": "/bin"}

    with pytest.raises(ValueError, match="at least one thread"):
        limit_threads(0, environ)
    assert environ == {"PATH": "/bin"}


def test_a_variable_set_by_hand_is_kept() -> None:
    environ = {"TF_NUM_INTEROP_THREADS": "2"}

    applied = limit_threads(1, environ)

    assert environ["TF_NUM_INTEROP_THREADS"] == "2"
    assert "TF_NUM_INTEROP_THREADS" not in applied
    assert environ["OMP_NUM_THREADS"] == applied["OMP_NUM_THREADS"] == "1"


@pytest.mark.parametrize("value", ["0", "many", "1025"])
def test_a_bad_setting_is_refused_naming_it(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARLFORGE_WORKER_THREADS", value)

    with pytest.raises(ValidationError, match="worker_threads"):
        Settings()


def test_a_started_worker_gives_torch_one_thread_by_default(tmp_path: Path) -> None:
    started = _start_worker(tmp_path)

    assert started["torch"] == 1
    assert started["env"] == dict.fromkeys(THREAD_VARIABLES, "1")


def test_a_started_worker_gives_torch_the_threads_it_is_set_to(tmp_path: Path) -> None:
    started = _start_worker(tmp_path, MARLFORGE_WORKER_THREADS="2")

    # OpenMP's variable is capped at the cores the process may use.
    assert started["torch"] == min(2, len(os.sched_getaffinity(0)))
    assert started["env"] == dict.fromkeys(THREAD_VARIABLES, "2")
