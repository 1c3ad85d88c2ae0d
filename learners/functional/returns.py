"""Return estimators: one-step TD targets (over ``Ops``) and GAE over a rollout (host NumPy).

Truncation and termination are different events. A terminated episode has no future: its target
does not bootstrap. A truncated episode (MPE's 25-step time limit, Gymnasium's TimeLimit) was cut
short: its target bootstraps from the value of the observation it ended on (the env adapter's
``final_obs``), exactly as if the episode had gone on. Conflating the two biases every value in a
time-limited task towards zero near the limit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.functional.ops import A, Ops

FloatArray = NDArray[np.float32]


def td_target(ops: Ops[A], rewards: A, q_next: A, terminated: A, gamma: float) -> A:
    """r + gamma * (1 - terminated) * Q(s', a'): the one-step target of DDPG, MADDPG and WQMIX.

    ``terminated`` is 1.0 where the episode truly ended and 0.0 otherwise (a truncated step counts
    as not terminated, so it bootstraps). The caller computes ``q_next`` with no gradient; this
    function also stops any that remains, so a target can never be trained towards.
    """
    return ops.stop_gradient(rewards + gamma * (1.0 - terminated) * q_next)


def gae(
    rewards: NDArray[Any],
    values: NDArray[Any],
    next_values: NDArray[Any],
    terminated: NDArray[Any],
    episode_end: NDArray[Any],
    gamma: float,
    gae_lambda: float,
) -> tuple[FloatArray, FloatArray]:
    """Generalised advantage estimation (Schulman et al., 2016) over a rollout; returns
    ``(advantages, returns)`` with ``returns = advantages + values``.

    Every array has the rollout's time axis first: ``rewards``, ``values`` and ``next_values``
    are shaped ``(T, ...)`` (e.g. ``(T, E, N)``); ``terminated`` and ``episode_end`` are shaped
    like them or broadcast to them (``(T, E, 1)`` for a per-env flag).

    - ``values[t]`` is V(s_t), de-normalised (in reward units).
    - ``next_values[t]`` is V of the observation that followed step t: V(s_{t+1}) inside an
      episode, V(final_obs) where the episode ended at t, the bootstrap value after the last step.
    - ``terminated[t]`` is 1 where the episode truly ended at t: its delta does not bootstrap.
    - ``episode_end[t]`` is 1 where the episode ended at t for any reason (terminated or truncated):
      the advantage recursion does not run across it into the next episode.

    delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
    A_t     = delta_t + gamma * lambda * (1 - episode_end_t) * A_{t+1}
    """
    steps = rewards.shape[0]
    shape = np.broadcast_shapes(rewards.shape, values.shape, next_values.shape)
    not_terminated = 1.0 - np.broadcast_to(terminated, shape).astype(np.float64)
    continues = 1.0 - np.broadcast_to(episode_end, shape).astype(np.float64)
    deltas = rewards + gamma * not_terminated * next_values - values
    advantages = np.zeros(shape, dtype=np.float64)
    running = np.zeros(shape[1:], dtype=np.float64)
    # The recursion runs backwards in time; each step is one vectorised op over (E, N, ...).
    for t in range(steps - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * continues[t] * running
        advantages[t] = running
    returns = advantages + values
    return advantages.astype(np.float32), returns.astype(np.float32)


def normalize_advantages(
    advantages: NDArray[Any], mask: NDArray[Any], eps: float = 1e-8
) -> FloatArray:
    """Advantages standardised to zero mean and unit std over the entries where ``mask`` is 1.

    Masked-out entries (dead agents, padding) neither enter the statistics nor keep a value: they
    become 0, so a stray value there cannot leak into a loss that forgets its mask.
    """
    weights = np.broadcast_to(mask, advantages.shape).astype(np.float64)
    count = max(float(weights.sum()), 1.0)
    mean = float((advantages * weights).sum()) / count
    var = float((((advantages - mean) ** 2) * weights).sum()) / count
    normalized = (advantages - mean) / (np.sqrt(var) + eps)
    return np.asarray(normalized * weights, dtype=np.float32)
