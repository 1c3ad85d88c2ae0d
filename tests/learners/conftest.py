"""Fixtures for the learners tests: small specs for any registry entry, and in-memory hooks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from learners.admission.parse import parse_spec
from learners.enums import ActionKind, Algorithm, Backend, EnvSuite
from learners.hooks import MemoryHooks
from learners.registry import entry
from learners.spec import ExperimentSpec

# Small networks and early updates: the tests check mechanics, not learning.
SMALL: dict[str, Any] = {"hidden_sizes": [32, 32], "batch_size": 32, "learning_starts": 100}


def smoke_env(algorithm: Algorithm) -> dict[str, Any]:
    """A cheap env every run of ``algorithm`` can train on."""
    algo = entry(algorithm)
    if EnvSuite.GYMNASIUM in algo.suites:
        return {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 2}
    continuous = ActionKind.DISCRETE not in algo.action_kinds
    return {
        "suite": "mpe",
        "id": "simple_spread_v3",
        "num_envs": 2,
        "kwargs": {"continuous_actions": continuous},
    }


def small_hyperparameters(algorithm: Algorithm) -> dict[str, Any]:
    """The ``SMALL`` overrides that ``algorithm``'s config has fields for."""
    fields = entry(algorithm).config.model_fields
    return {k: v for k, v in SMALL.items() if k in fields}


@pytest.fixture
def make_spec() -> Callable[..., ExperimentSpec]:
    """``make_spec(algorithm, backend, **top_level_overrides)``: a small, valid spec."""

    def build(
        algorithm: Algorithm | str = Algorithm.DDPG,
        backend: Backend | str = Backend.TORCH,
        **overrides: Any,
    ) -> ExperimentSpec:
        algorithm = Algorithm(algorithm)
        data: dict[str, Any] = {
            "name": "test",
            "algorithm": algorithm,
            "backend": backend,
            "env": smoke_env(algorithm),
            "total_steps": 400,
            "seed": 3,
            "device": "cpu",
            "hyperparameters": small_hyperparameters(algorithm),
            "evaluation": {"every_steps": 200, "episodes": 2},
            "checkpoint": {"every_steps": 200, "keep_last": 3},
        }
        data.update(overrides)
        return parse_spec(data)

    return build


@pytest.fixture
def hooks(tmp_path: Path) -> MemoryHooks:
    """In-memory hooks writing checkpoints under the test's temporary directory."""
    return MemoryHooks(checkpoint_dir=tmp_path)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n`` with ``--dist loadgroup`` (``make test``), send every test of one parity
    learner (algorithm, backend, variant) to the same worker, so that its update compiles once
    (``parity_cases.build`` keeps one learner per variant and process) instead of once per worker.
    A test names its learner by a ``variant`` parameter (a parity ``Variant``) or, where it builds
    an unchanged parity variant by name, a ``variant_name`` parameter."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        chosen = params.get("variant")
        name = chosen.name if hasattr(chosen, "name") else params.get("variant_name")
        if isinstance(name, str) and "algorithm" in params and "backend" in params:
            key = f"{params['algorithm']}-{params['backend']}-{name}"
            item.add_marker(pytest.mark.xdist_group(key))
