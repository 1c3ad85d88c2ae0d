"""TensorFlow is imported only when a TensorFlow job runs: not by the API, not by the catalogue
or spec validation (even of a TensorFlow spec), not by a PyTorch training run. Each check runs in a
fresh interpreter, since this test process may have imported TensorFlow already."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run_fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_api_and_spec_validation_do_not_import_tensorflow() -> None:
    out = run_fresh(
        """
        import sys
        import api.app
        from learners.registry import entries
        from learners.admission.parse import parse_spec
        spec = parse_spec({
            "name": "tf", "algorithm": "mappo", "backend": "tensorflow",
            "env": {"suite": "mpe", "id": "simple_spread_v3"}, "total_steps": 1000,
        })
        assert all(e.backends for e in entries())
        print(spec.backend, "tensorflow" in sys.modules)
        """
    )
    assert out.split() == ["tensorflow", "False"]


@pytest.mark.slow
def test_a_torch_run_does_not_import_tensorflow(tmp_path: Path) -> None:
    out = run_fresh(
        """
        import sys
        from learners.hooks import MemoryHooks
        from learners.admission.parse import parse_spec
        from learners.training import train
        spec = parse_spec({
            "name": "torch", "algorithm": "ddpg", "backend": "torch",
            "env": {"suite": "gymnasium", "id": "Pendulum-v1"}, "total_steps": 300,
            "hyperparameters": {"hidden_sizes": [16], "learning_starts": 100, "batch_size": 16},
            "evaluation": {"every_steps": 300, "episodes": 1},
            "checkpoint": {"every_steps": 300}, "device": "cpu",
        })
        hooks = MemoryHooks()
        train(spec, hooks)
        print(len(hooks.checkpoints), "tensorflow" in sys.modules)
        """
    )
    assert out.split() == ["1", "False"]


def test_tensorflow_learners_do_not_import_torch() -> None:
    out = run_fresh(
        """
        import sys
        import learners.backends.tensorflow.ddpg, learners.backends.tensorflow.maddpg
        import learners.backends.tensorflow.ppo, learners.backends.tensorflow.wqmix
        print("tensorflow" in sys.modules, "torch" in sys.modules, "mindspore" in sys.modules)
        """
    )
    assert out.split() == ["True", "False", "False"]
