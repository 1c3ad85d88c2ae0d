"""GAE, TD targets, advantage normalisation and the value normaliser."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learners.functional.normalizer import ValueNormalizer
from learners.functional.numpy_ops import NumpyOps
from learners.functional.returns import gae, normalize_advantages, td_target


def gae_loop(rewards, values, next_values, terminated, episode_end, gamma, lam):
    """The straightforward scalar implementation, one (env, agent) series at a time."""
    steps, envs, agents = rewards.shape
    advantages = np.zeros_like(rewards, dtype=np.float64)
    for e in range(envs):
        for n in range(agents):
            last = 0.0
            for t in reversed(range(steps)):
                if terminated[t, e]:
                    delta = rewards[t, e, n] - values[t, e, n]
                else:
                    delta = rewards[t, e, n] + gamma * next_values[t, e, n] - values[t, e, n]
                last = delta if episode_end[t, e] else delta + gamma * lam * last
                advantages[t, e, n] = last
    return advantages, advantages + values


def random_rollout(rng: np.random.Generator, steps: int = 40, envs: int = 4, agents: int = 3):
    rewards = rng.normal(size=(steps, envs, agents))
    values = rng.normal(size=(steps + 1, envs, agents))
    final_values = rng.normal(size=(steps, envs, agents))
    truncated = rng.uniform(size=(steps, envs)) < 0.08
    terminated = (rng.uniform(size=(steps, envs)) < 0.08) & ~truncated
    episode_end = truncated | terminated
    # V of what followed step t: the next step's value inside an episode, the final obs's otherwise.
    next_values = np.where(episode_end[..., None], final_values, values[1:])
    return rewards, values[:-1], next_values, terminated, episode_end


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0)])
def test_gae_matches_loop(rng: np.random.Generator, gamma: float, lam: float) -> None:
    rewards, values, next_values, terminated, episode_end = random_rollout(rng)
    assert episode_end.any() and terminated.any()
    adv, ret = gae(
        rewards, values, next_values, terminated[..., None], episode_end[..., None], gamma, lam
    )
    want_adv, want_ret = gae_loop(rewards, values, next_values, terminated, episode_end, gamma, lam)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-5)
    assert adv.dtype == np.float32 and adv.shape == rewards.shape


def test_truncation_bootstraps_and_termination_does_not() -> None:
    # One step, one env, one agent: r = 1, V(s) = 0, V(final obs) = 10.
    r, v, v_final = np.ones((1, 1, 1)), np.zeros((1, 1, 1)), np.full((1, 1, 1), 10.0)
    ended = np.ones((1, 1, 1))
    _, truncated_return = gae(r, v, v_final, np.zeros((1, 1, 1)), ended, 0.9, 0.95)
    _, terminated_return = gae(r, v, v_final, np.ones((1, 1, 1)), ended, 0.9, 0.95)
    assert truncated_return.item() == pytest.approx(1.0 + 0.9 * 10.0)
    assert terminated_return.item() == pytest.approx(1.0)


def test_gae_does_not_run_across_episode_boundaries() -> None:
    # Step 0 ends an episode (truncated); step 1's large advantage must not leak into step 0.
    r = np.array([[[0.0]], [[100.0]]])
    v = np.zeros((2, 1, 1))
    next_v = np.zeros((2, 1, 1))
    end = np.array([[[1.0]], [[0.0]]])
    adv, _ = gae(r, v, next_v, np.zeros((2, 1, 1)), end, 0.99, 0.95)
    assert adv[0].item() == 0.0 and adv[1].item() == 100.0


def test_td_target_on_every_backend(ops: Any, np_ops: NumpyOps, rng: np.random.Generator) -> None:
    rewards = rng.normal(size=(8, 1)).astype(np.float32)
    q_next = rng.normal(size=(8, 1)).astype(np.float32)
    terminated = (rng.uniform(size=(8, 1)) < 0.5).astype(np.float32)
    want = rewards + 0.97 * (1 - terminated) * q_next
    np.testing.assert_allclose(
        np_ops.to_numpy(td_target(np_ops, rewards, q_next, terminated, 0.97)), want, rtol=1e-6
    )
    got = td_target(ops, ops.asarray(rewards), ops.asarray(q_next), ops.asarray(terminated), 0.97)
    np.testing.assert_allclose(ops.to_numpy(got), want, rtol=2e-5, atol=2e-6)


def test_normalize_advantages_uses_only_unmasked_entries(rng: np.random.Generator) -> None:
    adv = rng.normal(3.0, 2.0, size=(10, 4, 3)).astype(np.float32)
    mask = (rng.uniform(size=(10, 4, 3)) > 0.3).astype(np.float32)
    adv[mask == 0] = 1e6  # garbage where masked must not move the statistics
    out = normalize_advantages(adv, mask)
    kept = out[mask > 0]
    assert kept.mean() == pytest.approx(0.0, abs=1e-5)
    assert kept.std() == pytest.approx(1.0, abs=1e-4)
    assert (out[mask == 0] == 0).all()


def test_value_normalizer_tracks_running_moments(rng: np.random.Generator) -> None:
    norm = ValueNormalizer()
    chunks = [rng.normal(5.0, 3.0, size=(20, 3)) for _ in range(4)]
    masks = [(rng.uniform(size=(20, 3)) > 0.25).astype(np.float64) for _ in range(4)]
    for x, m in zip(chunks, masks, strict=True):
        norm.update(x, m)
    seen = np.concatenate([x[m > 0] for x, m in zip(chunks, masks, strict=True)])
    assert norm.mean == pytest.approx(seen.mean(), rel=1e-10)
    assert norm.var == pytest.approx(seen.var(), rel=1e-10)
    assert norm.count == seen.size
    x = rng.normal(size=(7,))
    np.testing.assert_allclose(norm.denormalize(norm.normalize(x)), x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.normalize(x), (x - seen.mean()) / seen.std(), rtol=1e-5)
    restored = ValueNormalizer()
    restored.load_state(norm.state())
    assert (restored.mean, restored.var, restored.count) == (norm.mean, norm.var, norm.count)
