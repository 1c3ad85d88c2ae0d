"""WQMIX's weights and losses on every built backend against the oracle, and reference defect
``wqmix-weighting-and-central-loss`` (docs/reference-defects.md; the tests named ``defect7``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learners.functional import wqmix as W
from learners.functional.numpy_ops import NumpyOps


def close(actual: Any, expected: Any) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64),
        np.asarray(expected, dtype=np.float64),
        rtol=2e-5,
        atol=2e-6,
    )


def sample(rng: np.random.Generator, batch: int = 32, agents: int = 3) -> dict[str, np.ndarray]:
    actions = rng.integers(0, 4, size=(batch, agents))
    greedy = np.where(rng.uniform(size=(batch, agents)) < 0.7, actions, (actions + 1) % 4)
    agent_mask = (rng.uniform(size=(batch, agents)) > 0.2).astype(np.float32)
    mask = (rng.uniform(size=(batch,)) > 0.25).astype(np.float32)
    return {
        "actions": actions,
        "greedy": greedy,
        "agent_mask": agent_mask,
        "q_tot": rng.normal(size=(batch,)).astype(np.float32),
        "q_central": rng.normal(size=(batch,)).astype(np.float32),
        "q_central_greedy": rng.normal(size=(batch,)).astype(np.float32),
        "target": rng.normal(size=(batch,)).astype(np.float32),
        "mask": mask,
    }


def losses(ops: Any, d: dict[str, Any], weighting: str, alpha: float = 0.1) -> Any:
    is_greedy = W.is_greedy_joint_action(ops, d["actions"], d["greedy"], d["agent_mask"])
    weights = W.weights_for(
        ops,
        weighting,
        td_error=d["q_tot"] - d["target"],
        is_greedy=is_greedy,
        target=d["target"],
        q_central_greedy=d["q_central_greedy"],
        alpha=alpha,
    )
    return weights, W.wqmix_loss(ops, d["q_tot"], d["q_central"], d["target"], weights, d["mask"])


@pytest.mark.parametrize("weighting", ["ow", "cw"])
def test_wqmix_matches_oracle(
    ops: Any, np_ops: NumpyOps, rng: np.random.Generator, weighting: str
) -> None:
    data = sample(rng)
    want_w, want = losses(np_ops, data, weighting)
    got_w, got = losses(ops, {k: ops.asarray(v) for k, v in data.items()}, weighting)
    close(ops.to_numpy(got_w), want_w)
    for name in want._fields:
        close(ops.item(getattr(got, name)), np_ops.item(getattr(want, name)))


def test_ow_weights_closed_form(np_ops: NumpyOps, rng: np.random.Generator) -> None:
    d = sample(rng)
    weights, loss = losses(np_ops, d, "ow", alpha=0.25)
    td = d["q_tot"] - d["target"]
    np.testing.assert_array_equal(weights, np.where(td < 0, 1.0, 0.25))
    m = d["mask"]
    assert np_ops.item(loss.loss_qmix) == pytest.approx((weights * td**2 * m).sum() / m.sum())


def test_cw_weights_closed_form(np_ops: NumpyOps, rng: np.random.Generator) -> None:
    d = sample(rng)
    weights, _ = losses(np_ops, d, "cw", alpha=0.25)
    live_match = (d["actions"] == d["greedy"]) | (d["agent_mask"] == 0)
    important = live_match.all(-1) | (d["target"] > d["q_central_greedy"])
    np.testing.assert_array_equal(weights, np.where(important, 1.0, 0.25))
    assert 0 < (weights == 1.0).sum() < weights.size  # both branches are exercised


def test_only_cw_reads_the_central_greedy_value(np_ops: NumpyOps, rng: np.random.Generator) -> None:
    """OW callers skip computing Q*_target(s, u^) (every backend's update does); CW cannot."""
    d = sample(rng)
    common = {
        "td_error": d["q_tot"] - d["target"], "target": d["target"], "alpha": 0.25,
        "is_greedy": W.is_greedy_joint_action(np_ops, d["actions"], d["greedy"], d["agent_mask"]),
    }  # fmt: skip
    with_value = W.weights_for(np_ops, "ow", q_central_greedy=d["q_central_greedy"], **common)
    without = W.weights_for(np_ops, "ow", q_central_greedy=None, **common)
    np.testing.assert_array_equal(without, with_value)
    with pytest.raises(ValueError, match="CW weighting needs"):
        W.weights_for(np_ops, "cw", q_central_greedy=None, **common)


def test_defect7_unknown_weighting_raises(np_ops: NumpyOps, rng: np.random.Generator) -> None:
    with pytest.raises(ValueError, match="unknown WQMIX weighting 'uniform'"):
        losses(np_ops, sample(rng), "uniform")


def test_defect7_central_loss_is_a_masked_mean(np_ops: NumpyOps, rng: np.random.Generator):
    d = sample(rng)
    _, loss = losses(np_ops, d, "ow")
    m = d["mask"]
    want = (((d["q_central"] - d["target"]) ** 2) * m).sum() / m.sum()
    assert np_ops.item(loss.loss_central) == pytest.approx(want)
    # Neither the unmasked mean nor the sum over the agent-mask sum of the reference's copies.
    assert np_ops.item(loss.loss_central) != pytest.approx(
        np.mean((d["q_central"] - d["target"]) ** 2)
    )
    agent_sum = d["agent_mask"].sum()
    assert np_ops.item(loss.loss_central) != pytest.approx(
        ((d["q_central"] - d["target"]) ** 2).sum() / agent_sum
    )
