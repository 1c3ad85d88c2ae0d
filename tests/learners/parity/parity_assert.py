"""How the parity suite compares two learners' numbers, and moves state between them.

Tolerances are relative, per tensor: an entry passes when ``|a - b| <= rtol * (|b| + max|b|)``,
i.e. relative to itself or, for entries far below the tensor's largest (where a float32 sum's
rounding is all that is left of a gradient that cancels), relative to the tensor's scale. Integer
tensors (random generator states, counters) must be equal.

Scalar stats are relative too, with a floor of ``STAT_FLOOR``: float32's resolution of the O(1)
terms a loss averages. A PPO policy loss or an explained variance is a mean of such terms that
cancels to near zero, and no float32 computation knows it better than that.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners import checkpoint
from learners.checkpoint import Manifest
from learners.enums import Algorithm, Backend

ONE_UPDATE = 1e-5
ADAM_STEP = 1e-4
"""Weights after one Adam step. The step is ``lr * g / (|g| + eps)``: for an entry whose gradient
is near ``eps`` (1e-5) the rounding of ``g``, within ``ONE_UPDATE`` of the gradient's scale, is
multiplied by up to ``lr / eps`` (50 at lr 5e-4). Measured: IPPO's two-team GRU critic, a GRU bias
with g = -5.4e-6, moved 1.03x ``ONE_UPDATE`` apart in MindSpore and PyTorch; MAPPO's agent-specific
critic, a bias with g = 2.3e-6 whose gradients differed by 1e-9 (5e-8 of the gradient's scale, well
inside ``ONE_UPDATE``), moved 3.5e-8 apart in TensorFlow and PyTorch (5.9e-5 of the bias's scale,
lr 5e-4). The gradients themselves are held to ``ONE_UPDATE`` before the step."""
TEN_UPDATES = 1e-3
ADAM_BETA1 = 0.9
STAT_FLOOR = 2e-7


def assert_close(actual: Any, expected: Any, rtol: float, what: str, floor: float = 1e-12) -> None:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    scale = float(np.max(np.abs(e))) if e.size else 0.0
    err = np.abs(a - e)
    bound = rtol * (np.abs(e) + scale) + floor
    worst = float(np.max(err / bound)) if e.size else 0.0
    assert worst <= 1.0, (
        f"{what}: differs by up to {float(np.max(err)):.3g} "
        f"({worst:.3g}x the tolerance rtol={rtol:g}, scale {scale:.3g})"
    )


def assert_stats_close(
    actual: Mapping[str, float], expected: Mapping[str, float], rtol: float, what: str
) -> None:
    assert set(actual) == set(expected), (
        f"{what}: stats keys {sorted(actual)} != {sorted(expected)}"
    )
    for name, value in expected.items():
        if np.isnan(value):
            assert np.isnan(actual[name]), f"{what}: {name} is {actual[name]}, expected NaN"
            continue
        assert_close(actual[name], value, rtol, f"{what}: stat {name}", floor=STAT_FLOOR)


def assert_states_close(
    actual: Mapping[str, NDArray[Any]], expected: Mapping[str, NDArray[Any]], rtol: float, what: str
) -> None:
    """Every tensor of two learners' ``state()``: same names, same shapes, close floats, equal
    integers."""
    assert set(actual) == set(expected), (
        f"{what}: only in actual {sorted(set(actual) - set(expected))}, "
        f"only in expected {sorted(set(expected) - set(actual))}"
    )
    for name, value in expected.items():
        if np.asarray(value).dtype.kind == "f":
            assert_close(actual[name], value, rtol, f"{what}: {name}")
        else:
            np.testing.assert_array_equal(actual[name], value, err_msg=f"{what}: {name}")


def adam_steps(state: Mapping[str, NDArray[Any]]) -> set[float]:
    """The step counts of every Adam moment in a learner's state."""
    return {float(v) for k, v in state.items() if k.startswith("optim/") and k.endswith("/step")}


def applied_gradients(state: Mapping[str, NDArray[Any]]) -> dict[str, NDArray[np.float64]]:
    """The (clipped) gradient of each parameter in a learner's one and only gradient step, read
    back from Adam: after one step ``exp_avg = (1 - beta1) * grad``, in every backend."""
    assert adam_steps(state) == {1.0}, f"not a single gradient step: {adam_steps(state)}"
    return {
        name[: -len("/exp_avg")]: np.asarray(value, np.float64) / (1.0 - ADAM_BETA1)
        for name, value in state.items()
        if name.startswith("optim/") and name.endswith("/exp_avg")
    }


def global_norm(grads: Mapping[str, NDArray[Any]], net: str | None = None) -> float:
    """The global norm of the gradients of ``net`` (``optim/<net>/...``), or of all of them."""
    chosen = [g for k, g in grads.items() if net is None or k.startswith(f"optim/{net}/")]
    return float(np.sqrt(sum(float(np.sum(np.square(g))) for g in chosen)))


def manifest(algorithm: Algorithm, backend: Backend, info_json: dict[str, Any]) -> Manifest:
    """A manifest for a learner-only checkpoint written by the tests."""
    return Manifest(
        algorithm=algorithm,
        backend=backend,
        spec={"name": "parity"},
        env=info_json,
        step=0,
        runner={},
        resumable_on=[backend],
        policy_backends=[backend],
    )


def transfer(
    source: Any, target: Any, algorithm: Algorithm, source_backend: Backend, path: Path
) -> None:
    """Copy ``source``'s whole state into ``target`` through a portable checkpoint file."""
    info_json = checkpoint.env_info_to_json(source.info)
    checkpoint.write(path, source.state(), manifest(algorithm, source_backend, info_json))
    tensors, _ = checkpoint.read(path)
    target.load_state(tensors)
