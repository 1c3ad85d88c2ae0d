"""Fixtures for the shared-math tests: every built backend's ``Ops`` against the NumPy oracle.

A backend is covered as soon as ``learners/backends/<framework>/ops.py`` exists: the list is
discovered, not written here, so the TensorFlow and MindSpore ops join these tests without edits.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import numpy as np
import pytest

from learners.enums import Backend
from learners.functional.numpy_ops import NumpyOps

_OPS_CLASS = {
    Backend.TORCH: "TorchOps",
    Backend.TENSORFLOW: "TensorFlowOps",
    Backend.MINDSPORE: "MindSporeOps",
}


def built_backends() -> list[Backend]:
    """Backends whose ops module exists in the source tree."""
    built = []
    for backend in Backend:
        try:
            found = importlib.util.find_spec(f"learners.backends.{backend.value}.ops")
        except ModuleNotFoundError:
            found = None
        if found is not None:
            built.append(backend)
    return built


def make_ops(backend: Backend) -> Any:
    module = importlib.import_module(f"learners.backends.{backend.value}.ops")
    return getattr(module, _OPS_CLASS[backend])()


@pytest.fixture(params=built_backends(), ids=lambda b: b.value)
def ops(request: pytest.FixtureRequest) -> Any:
    """One backend's ``Ops`` (parametrised over every built backend)."""
    return make_ops(request.param)


@pytest.fixture
def np_ops() -> NumpyOps:
    """The oracle."""
    return NumpyOps()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
