"""Replays in the docker API image. The compose file builds that image with the frameworks in its
``EXTRAS`` build argument (PyTorch) and no other; here the renderer runs as the API runs it (a
``python -m learners.replay`` subprocess) with every other framework made unimportable, as in that
image, and must render a checkpoint of every backend's run: the renderer acts with a framework the
image has whenever the checkpoint's policy can be loaded by it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from learners.enums import Backend
from learners.registry import entry

ROOT = Path(__file__).resolve().parents[2]

# Loaded by every Python started with this folder on PYTHONPATH: imports of the frameworks the
# image lacks fail exactly as they would there.
_SITECUSTOMIZE = """
import sys

# A None entry is how Python marks a module as absent: ``import`` raises ModuleNotFoundError and
# ``importlib.util.find_spec`` answers None (PyTorch probes for optional modules that way).
for name in {absent!r}:
    sys.modules[name] = None
"""


def _api_image_frameworks() -> set[Backend]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
    services = compose["services"]
    # The API runs the image the migrate job builds.
    assert services["api"]["image"] == services["migrate"]["image"]
    extras = str(services["migrate"]["build"]["args"]["EXTRAS"])
    return {Backend(e.strip()) for e in extras.split(",") if e.strip()}


def _image_like_env(folder: Path, frameworks: set[Backend]) -> dict[str, str]:
    absent = sorted(b.value for b in Backend if b not in frameworks)
    site = folder / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(absent=absent))
    return {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}


def _checkpoint(folder: Path, backend: Backend) -> Path:
    from learners.admission.parse import parse_spec
    from learners.hooks import MemoryHooks
    from learners.training import train

    spec = parse_spec(
        {
            "name": "api-image-replay",
            "algorithm": "ddpg",
            "backend": backend.value,
            "env": {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 1},
            "total_steps": 100,
            "hyperparameters": {"learning_starts": 50, "batch_size": 16, "hidden_sizes": [16]},
            "evaluation": {"every_steps": 100, "episodes": 1},
            "checkpoint": {"every_steps": 100, "keep_last": 1},
        }
    )
    hooks = MemoryHooks(checkpoint_dir=folder)
    train(spec, hooks)
    path = hooks.checkpoints[-1][1]
    assert path is not None
    return path


@pytest.mark.slow  # trains a checkpoint and renders it in a subprocess
@pytest.mark.parametrize("backend", sorted(entry("ddpg").backends), ids=str)
def test_the_api_image_renders_the_replay_of_each_backends_checkpoint(
    tmp_path: Path, backend: Backend
) -> None:
    frameworks = _api_image_frameworks()
    assert Backend.TORCH in frameworks
    env = _image_like_env(tmp_path, frameworks)
    absent = [b for b in Backend if b not in frameworks]
    if absent:
        # The premise: the frameworks the image lacks cannot be imported here either.
        probe = subprocess.run(
            [sys.executable, "-c", f"import {absent[0].value}"], env=env, capture_output=True
        )
        assert probe.returncode != 0 and b"ModuleNotFoundError" in probe.stderr
    checkpoint = _checkpoint(tmp_path, backend)
    out = tmp_path / "replay.gif"

    result = subprocess.run(
        [sys.executable, "-m", "learners.replay", "--checkpoint", str(checkpoint)]
        + ["--out", str(out), "--max-frames", "20"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:6] in (b"GIF87a", b"GIF89a")


def test_the_api_image_has_software_opengl_for_mujoco_replays() -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()

    # MuJoCo's offscreen renderer (MUJOCO_GL=egl) on a host without a GPU needs Mesa's EGL.
    assert str(compose["services"]["migrate"]["build"]["args"]["REPLAYS"]) == "1"
    assert 'if [ -n "$REPLAYS" ]' in dockerfile and "libegl-mesa0" in dockerfile
