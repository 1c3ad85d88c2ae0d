"""Cross-backend parity: every registered learner against the PyTorch one, from identical weights
(copied through the portable checkpoint) and identical data with zeros in the masks.

- after the copy, both hold the same state and act the same, greedily and exploring (the same
  noise from the same generator);
- one update: every stat, every gradient (read back from Adam's first moment) and every tensor of
  the state after it (weights, targets, Adam's moments, value normaliser, generators) agree to 1e-5;
- ten updates (with the step size decaying for on-policy learners): the stats of each and the state
  after them agree to 1e-3;
- CW-QMIX: ten updates on batches where every other row is the greedy joint action (CW weighs it
  1, a branch random data reaches by chance only);
- the other way round: a run trained in the other backend resumes in PyTorch and the two go on
  making the same update.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from parity_assert import (
    ADAM_STEP,
    ONE_UPDATE,
    TEN_UPDATES,
    adam_steps,
    applied_gradients,
    assert_close,
    assert_states_close,
    assert_stats_close,
    transfer,
)
from parity_cases import REFERENCE, Variant, build, data, observation, parity_params, update

from learners.algorithms.wqmix import WQMIXConfig
from learners.enums import Algorithm, Backend
from learners.envs.base import Observation
from learners.registry import RunnerKind, entry

PARAMS = parity_params()


def _pair(
    algorithm: Algorithm, backend: Backend, variant: Variant, tmp_path: Path
) -> tuple[Any, Any]:
    """The reference learner and ``backend``'s, the latter loaded with the former's weights."""
    reference = build(algorithm, REFERENCE, variant)
    other = build(algorithm, backend, variant)
    transfer(reference, other, algorithm, REFERENCE, tmp_path / "start.safetensors")
    return reference, other


@pytest.mark.parametrize(("algorithm", "backend", "variant"), PARAMS)
def test_same_start_same_actions(
    algorithm: Algorithm, backend: Backend, variant: Variant, tmp_path: Path
) -> None:
    reference, other = _pair(algorithm, backend, variant, tmp_path)
    assert_states_close(other.state(), reference.state(), 0.0, "after the copy")
    obs = observation(variant, seed=5)
    for explore in (False, True, True):
        want = reference.act(obs, explore=explore)
        got = other.act(obs, explore=explore)
        if variant.info.action_kind == "discrete":
            np.testing.assert_array_equal(got, want, err_msg=f"explore={explore}")
        else:
            assert_close(got, want, ONE_UPDATE, f"actions, explore={explore}")
    if entry(algorithm).runner == RunnerKind.ON_POLICY:
        _rollout_steps_agree(reference, other, obs)
    if isinstance(variant.config, WQMIXConfig) and variant.config.recurrent:
        _explore_steps_agree(reference, other, obs)


def _rollout_steps_agree(reference: Any, other: Any, obs: Any) -> None:
    """Two rollout steps (the second from the first's GRU state): actions, log-probs and hidden
    states agree, so both backends collect the same rollout."""
    memories = [learner.initial_memory(obs.obs.shape[0]) for learner in (reference, other)]
    for step in range(2):
        (want, memories[0]), (got, memories[1]) = (
            learner.rollout_step(obs, memory)
            for learner, memory in zip((reference, other), memories, strict=True)
        )
        np.testing.assert_array_equal(got.actions.shape, want.actions.shape)
        for field in ("actions", "env_actions", "log_prob", "hidden"):
            want_value, got_value = getattr(want, field), getattr(got, field)
            assert (got_value is None) == (want_value is None), field
            if want_value is not None:
                assert_close(got_value, want_value, ONE_UPDATE, f"step {step} {field}")


def _explore_steps_agree(reference: Any, other: Any, obs: Any) -> None:
    """Recurrent WQMIX: three exploring steps of the training copies, each from the memory the
    last one returned, take the same actions (the same epsilon draws) and reach the same GRU
    states (the memory is the backend's (E, N, H) array)."""
    memories = [learner.initial_memory(obs.obs.shape[0]) for learner in (reference, other)]
    for step in range(3):
        want, memories[0] = reference.explore_step(obs, memories[0])
        got, memories[1] = other.explore_step(obs, memories[1])
        np.testing.assert_array_equal(got, want, err_msg=f"explore step {step}")
        host = [m.asnumpy() if hasattr(m, "asnumpy") else np.asarray(m) for m in memories]
        assert_close(host[1], host[0], ONE_UPDATE, f"memory after explore step {step}")


@pytest.mark.parametrize(("algorithm", "backend", "variant"), PARAMS)
def test_one_update(
    algorithm: Algorithm, backend: Backend, variant: Variant, tmp_path: Path
) -> None:
    reference, other = _pair(algorithm, backend, variant, tmp_path)
    batch = data(algorithm, variant, seed=0)
    want = update(algorithm, reference, batch, 0)
    got = update(algorithm, other, batch, 0)
    assert_stats_close(got, want, ONE_UPDATE, "stats of one update")
    after_reference, after_other = reference.state(), other.state()
    assert adam_steps(after_other) == adam_steps(after_reference) != set()
    if adam_steps(after_reference) == {1.0}:  # one gradient step: Adam's moment is the gradient
        grads_reference = applied_gradients(after_reference)
        grads_other = applied_gradients(after_other)
        assert set(grads_other) == set(grads_reference)
        for name, grad in grads_reference.items():
            assert_close(grads_other[name], grad, ONE_UPDATE, f"gradient {name}")
    assert_states_close(after_other, after_reference, ADAM_STEP, "state after one update")


@pytest.mark.parametrize(("algorithm", "backend", "variant"), PARAMS)
def test_ten_updates(
    algorithm: Algorithm, backend: Backend, variant: Variant, tmp_path: Path
) -> None:
    reference, other = _pair(algorithm, backend, variant, tmp_path)
    for k in range(10):
        batch = data(algorithm, variant, seed=k)
        want = update(algorithm, reference, batch, k)
        got = update(algorithm, other, batch, k)
        assert_stats_close(got, want, TEN_UPDATES, f"stats of update {k}")
    assert_states_close(other.state(), reference.state(), TEN_UPDATES, "state after ten updates")


CW_TRANSITION_PARAMS = [
    p
    for p in PARAMS
    if isinstance(p.values[2].config, WQMIXConfig)
    and p.values[2].config.weighting == "cw"
    and not p.values[2].config.recurrent
]


@pytest.mark.parametrize(("algorithm", "backend", "variant"), CW_TRANSITION_PARAMS)
def test_cw_qmix_on_greedy_joint_actions(
    algorithm: Algorithm, backend: Backend, variant: Variant, tmp_path: Path
) -> None:
    """A training replay holds mostly greedy joint actions, random data few (with three agents of
    five actions, one row in 125 where every action is available), so CW's first branch (w = 1 on
    the greedy joint action) would be reached by chance only. Here every other row of each batch
    takes the reference agents' greedy joint action at that moment, for ten updates: the first
    update's stats agree to 1e-5, every later one's and the state after them to 1e-3."""
    config = variant.config
    assert isinstance(config, WQMIXConfig)
    reference, other = _pair(algorithm, backend, variant, tmp_path)
    for k in range(10):
        batch = data(algorithm, variant, seed=30 + k)
        obs = Observation(
            obs=batch.obs, obs_mask=np.ones_like(batch.obs), state=batch.state,
            agent_mask=batch.agent_mask, avail_actions=batch.avail_actions,
        )  # fmt: skip
        batch.actions[::2] = reference.act(obs, explore=False)[::2]
        want = update(algorithm, reference, batch, k)
        got = update(algorithm, other, batch, k)
        assert_stats_close(got, want, ONE_UPDATE if k == 0 else TEN_UPDATES, f"update {k}")
        # The greedy rows with a live agent weigh 1, so the test reaches the branch it is for.
        live = batch.agent_mask.max(axis=-1) > 0.5
        greedy_share = live[::2].sum() / live.sum()
        floor = greedy_share + config.alpha * (1 - greedy_share)
        assert want["weight_mean"] >= floor - 1e-6, (k, want["weight_mean"], floor)
    assert_states_close(other.state(), reference.state(), TEN_UPDATES, "state after ten updates")


@pytest.mark.parametrize(("algorithm", "backend", "variant"), PARAMS)
def test_trained_elsewhere_resumes_in_the_reference(
    algorithm: Algorithm, backend: Backend, variant: Variant, tmp_path: Path
) -> None:
    """Train in ``backend``, then evaluate and resume in PyTorch: the same actions, and the next
    update is the same in both."""
    other = build(algorithm, backend, variant)
    for k in range(3):
        update(algorithm, other, data(algorithm, variant, seed=10 + k), k)
    reference = build(algorithm, REFERENCE, variant)
    # Both resume from the file: what a learner keeps between updates outside its state (a
    # recurrent critic's GRU state at the next rollout's start) starts afresh in both.
    path = tmp_path / "trained.safetensors"
    transfer(other, reference, algorithm, backend, path)
    transfer(other, other, algorithm, backend, path)
    assert_states_close(reference.state(), other.state(), 0.0, "after the copy")
    obs = observation(variant, seed=6)
    assert_close(
        reference.act(obs, explore=False), other.act(obs, explore=False), ONE_UPDATE, "actions"
    )
    batch = data(algorithm, variant, seed=20)
    want = update(algorithm, reference, batch, 3)
    got = update(algorithm, other, batch, 3)
    assert_stats_close(got, want, ONE_UPDATE, "stats of the resumed update")
    assert_states_close(other.state(), reference.state(), ONE_UPDATE, "state after resuming")
