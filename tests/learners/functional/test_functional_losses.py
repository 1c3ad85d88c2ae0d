"""The shared losses and distributions on every built backend against the NumPy oracle, with masks
that contain zeros, plus independent checks of the oracle itself (closed forms, torch.distributions)
and one test per reference defect that fails on the defect (docs/reference-defects.md; a test
named ``test_defectN_...`` guards the defect whose old number is N)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from learners.functional import distributions as D
from learners.functional import losses as L
from learners.functional.numpy_ops import NumpyOps


def close(actual: Any, expected: Any, rtol: float = 2e-5, atol: float = 2e-6) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64),
        np.asarray(expected, dtype=np.float64),
        rtol=rtol,
        atol=atol,
    )


def batch(rng: np.random.Generator, shape: tuple[int, ...] = (16, 3)) -> dict[str, np.ndarray]:
    """A PPO minibatch (B, N) with some agents masked out."""
    mask = (rng.uniform(size=shape) > 0.3).astype(np.float32)
    mask[0, :] = 0.0  # a whole row of zeros
    mask[1, 0] = 1.0
    log_prob_old = rng.normal(-1.0, 0.3, size=shape).astype(np.float32)
    return {
        "log_prob": (log_prob_old + rng.normal(0, 0.3, size=shape)).astype(np.float32),
        "log_prob_old": log_prob_old,
        "advantages": rng.normal(size=shape).astype(np.float32),
        "values": rng.normal(size=shape).astype(np.float32),
        "values_old": rng.normal(size=shape).astype(np.float32),
        "returns": (rng.normal(size=shape) * 3).astype(np.float32),
        "mask": mask,
    }


def on(ops: Any, data: dict[str, np.ndarray]) -> dict[str, Any]:
    return {k: ops.asarray(v) for k, v in data.items()}


def test_masked_mean_divides_by_mask_sum(ops: Any, np_ops: NumpyOps, rng: np.random.Generator):
    x = rng.normal(size=(5, 4)).astype(np.float32)
    mask = np.array([[1, 0, 1, 0]] * 5, dtype=np.float32)
    x[:, 1] = np.nan  # masked entries may hold anything, even NaN
    want = float(np.nansum(x * mask) / mask.sum())
    assert np_ops.item(L.masked_mean(np_ops, x, mask)) == pytest.approx(want)
    close(ops.item(L.masked_mean(ops, ops.asarray(x), ops.asarray(mask))), want)
    zeros = np.zeros_like(mask)
    assert ops.item(L.masked_mean(ops, ops.asarray(x), ops.asarray(zeros))) == 0.0


@pytest.mark.parametrize("delta", [0.5, 1.0, 3.0])
def test_huber_matches_closed_form(ops: Any, np_ops: NumpyOps, delta: float) -> None:
    error = np.linspace(-6, 6, 49).astype(np.float32)
    want = np.where(np.abs(error) <= delta, 0.5 * error**2, delta * (np.abs(error) - 0.5 * delta))
    close(np_ops.to_numpy(L.huber(np_ops, error, delta)), want)
    close(ops.to_numpy(L.huber(ops, ops.asarray(error), delta)), want)


def test_policy_loss_matches_oracle(ops: Any, np_ops: NumpyOps, rng: np.random.Generator):
    data = batch(rng)
    args = ("log_prob", "log_prob_old", "advantages", "mask")
    want = L.policy_loss(np_ops, *(data[k] for k in args), clip_eps=0.2)
    got = L.policy_loss(ops, *(on(ops, data)[k] for k in args), clip_eps=0.2)
    for name in want._fields:
        close(ops.item(getattr(got, name)), np_ops.item(getattr(want, name)))
    # Closed form of the oracle on unmasked entries.
    m = data["mask"] > 0
    ratio = np.exp(data["log_prob"] - data["log_prob_old"])[m]
    adv = data["advantages"][m]
    expected = -np.mean(np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv))
    assert np_ops.item(want.loss) == pytest.approx(expected, rel=1e-6)
    assert np_ops.item(want.clip_fraction) == pytest.approx(np.mean(np.abs(ratio - 1) > 0.2))


@pytest.mark.parametrize("value_clip_eps", [None, 0.2])
@pytest.mark.parametrize("huber_delta", [None, 1.0, 10.0])
def test_value_loss_matches_oracle(
    ops: Any, np_ops: NumpyOps, rng: np.random.Generator, value_clip_eps: Any, huber_delta: Any
) -> None:
    data = batch(rng)
    args = ("values", "values_old", "returns", "mask")
    want = L.value_loss(np_ops, *(data[k] for k in args), value_clip_eps, huber_delta)
    got = L.value_loss(ops, *(on(ops, data)[k] for k in args), value_clip_eps, huber_delta)
    close(ops.item(got), np_ops.item(want))


def test_value_loss_clipped_closed_form(np_ops: NumpyOps, rng: np.random.Generator) -> None:
    data = batch(rng)
    v, v_old, ret, mask = (data[k] for k in ("values", "values_old", "returns", "mask"))
    v_clip = v_old + np.clip(v - v_old, -0.2, 0.2)
    per_entry = np.maximum((v - ret) ** 2, (v_clip - ret) ** 2)
    want = (per_entry * mask).sum() / mask.sum()
    assert np_ops.item(L.value_loss(np_ops, v, v_old, ret, mask, 0.2, None)) == pytest.approx(want)


def test_categorical_with_unavailable_actions(
    ops: Any, np_ops: NumpyOps, rng: np.random.Generator
) -> None:
    torch = pytest.importorskip("torch")
    logits = rng.normal(size=(6, 3, 5)).astype(np.float32)
    avail = (rng.uniform(size=(6, 3, 5)) > 0.4).astype(np.float32)
    avail[..., 2] = 1.0  # at least one available action everywhere
    actions = np.argmax(avail * rng.uniform(size=avail.shape), axis=-1)  # available actions only
    want_lp = D.categorical_log_prob(np_ops, logits, actions, avail)
    want_h = D.categorical_entropy(np_ops, logits, avail)
    got_lp = D.categorical_log_prob(
        ops, ops.asarray(logits), ops.asarray(actions), ops.asarray(avail)
    )
    got_h = D.categorical_entropy(ops, ops.asarray(logits), ops.asarray(avail))
    close(ops.to_numpy(got_lp), want_lp)
    close(ops.to_numpy(got_h), want_h)
    assert np.isfinite(ops.to_numpy(got_h)).all()
    # The oracle agrees with an independent implementation restricted to the available actions.
    masked = torch.tensor(np.where(avail > 0, logits, -np.inf), dtype=torch.float64)
    dist = torch.distributions.Categorical(logits=masked)
    close(want_lp, dist.log_prob(torch.tensor(actions)).numpy())
    probs = dist.probs.numpy()
    ref_h = -np.sum(np.where(probs > 0, probs * np.log(np.where(probs > 0, probs, 1)), 0), -1)
    close(want_h, ref_h)


def test_normal_log_prob_and_entropy(ops: Any, np_ops: NumpyOps, rng: np.random.Generator):
    torch = pytest.importorskip("torch")
    mean = rng.normal(size=(5, 3, 2)).astype(np.float32)
    log_std = rng.normal(-0.5, 0.3, size=(5, 3, 2)).astype(np.float32)
    actions = rng.normal(size=(5, 3, 2)).astype(np.float32)
    want_lp = D.normal_log_prob(np_ops, actions, mean, log_std)
    want_h = D.normal_entropy(np_ops, log_std)
    got_lp = D.normal_log_prob(ops, ops.asarray(actions), ops.asarray(mean), ops.asarray(log_std))
    close(ops.to_numpy(got_lp), want_lp)
    close(ops.to_numpy(D.normal_entropy(ops, ops.asarray(log_std))), want_h)
    ref = torch.distributions.Normal(
        torch.tensor(mean, dtype=torch.float64), torch.tensor(np.exp(log_std), dtype=torch.float64)
    )
    close(want_lp, ref.log_prob(torch.tensor(actions, dtype=torch.float64)).sum(-1).numpy())
    close(want_h, ref.entropy().sum(-1).numpy())


# -- one test per reference defect the shared losses fix ------------------------------------


def test_defect1_critic_regresses_onto_returns_not_old_values(np_ops: NumpyOps) -> None:
    values = np.array([[1.0, 2.0]])
    values_old = np.array([[5.0, -3.0]])
    returns = values.copy()  # the critic already predicts the returns exactly
    mask = np.ones_like(values)
    loss = L.value_loss(np_ops, values, values_old, returns, mask, None, None)
    assert np_ops.item(loss) == 0.0
    # The defect (target = old values) would report a large loss here.
    defect = L.value_loss(np_ops, values, values_old, values_old, mask, None, None)
    assert np_ops.item(defect) > 1.0


def test_defect2_clip_eps_is_not_halved(np_ops: NumpyOps) -> None:
    # ratio = 1.15 lies inside [0.8, 1.2] but outside the halved range [0.9, 1.1].
    log_prob = np.array([[math.log(1.15)]])
    zeros, ones = np.zeros((1, 1)), np.ones((1, 1))
    result = L.policy_loss(np_ops, log_prob, zeros, ones, ones, clip_eps=0.2)
    assert np_ops.item(result.loss) == pytest.approx(-1.15)
    assert np_ops.item(result.clip_fraction) == 0.0
    halved = L.policy_loss(np_ops, log_prob, zeros, ones, ones, clip_eps=0.1)
    assert np_ops.item(halved.loss) == pytest.approx(-1.1)


def test_defect2_huber_delta_is_honoured(np_ops: NumpyOps) -> None:
    values, returns, mask = np.array([[3.0]]), np.array([[0.0]]), np.ones((1, 1))
    small = np_ops.item(L.value_loss(np_ops, values, values, returns, mask, None, 1.0))
    large = np_ops.item(L.value_loss(np_ops, values, values, returns, mask, None, 10.0))
    assert small == pytest.approx(1.0 * (3.0 - 0.5))  # linear branch with delta = 1
    assert large == pytest.approx(0.5 * 9.0)  # quadratic branch with delta = 10


def test_defect2_masked_entries_do_not_touch_the_value_loss(
    np_ops: NumpyOps, rng: np.random.Generator
) -> None:
    data = batch(rng)
    mask = data["mask"]
    args = [data[k] for k in ("values", "values_old", "returns")]
    before = np_ops.item(L.value_loss(np_ops, *args, mask, 0.2, 1.0))
    # Change predictions, old values and targets only where the mask is zero.
    changed = [
        np.where(mask > 0, a, a + 100.0 * rng.normal(size=a.shape)).astype(a.dtype) for a in args
    ]
    after = np_ops.item(L.value_loss(np_ops, *changed, mask, 0.2, 1.0))
    assert after == pytest.approx(before, rel=1e-12)
    # The reference multiplied the prediction by the mask and reduced the Huber loss with a
    # mean over every entry, so masked entries pulled it: that gives a different number.
    pred = args[0] * mask
    defect = np.mean(np_ops.to_numpy(L.huber(np_ops, pred - args[2], 1.0))) * mask
    assert defect.sum() / mask.sum() != pytest.approx(before)
