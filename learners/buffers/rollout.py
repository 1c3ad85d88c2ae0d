"""The on-policy rollout buffer: preallocated arrays shaped (T, E, N, ...).

T is the rollout length (steps per env copy), E the env copies, N the agents. The runner writes
one row per step in place (no per-step allocation); after the rollout the learner turns it into
advantages and targets and trains on it, then the buffer is reused for the next rollout.

For recurrent policies the buffer also keeps the hidden state each network had *before* each step,
and ``chunks`` cuts the rollout into training sequences: each env's steps are split at episode
boundaries and every ``chunk_length`` steps, and shorter pieces are padded, with a ``filled`` mask
marking the real steps. A chunk starts from the hidden state recorded at its first step, so the
GRU sees exactly what it saw while acting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition
from learners.envs.vector.arrays import NUMPY, ArrayOps


@dataclass(frozen=True)
class RolloutStep:
    """What a policy did at one rollout step, for every copy and agent (host-side NumPy)."""

    actions: NDArray[Any]
    """The sampled actions, as their log-probabilities were computed (unclipped Gaussians)."""
    env_actions: NDArray[Any]
    """What the env receives: continuous actions clipped to [-1, 1]."""
    log_prob: NDArray[np.float32]
    """(E, N)"""
    hidden: NDArray[np.float32] | None
    """Recurrent policies: the actor's GRU state (E, N, H) *before* this step."""


@dataclass(frozen=True)
class Chunks:
    """Training sequences over a rollout: ``time[c, l]`` and ``env[c]`` index the buffer."""

    time: NDArray[np.int64]
    """(C, L) the rollout step of each position; padding repeats a valid step."""
    env: NDArray[np.int64]
    """(C,) the env copy each chunk comes from."""
    filled: NDArray[np.float32]
    """(C, L) 1 for real steps, 0 for padding."""

    def gather(self, array: NDArray[Any]) -> NDArray[Any]:
        """``array`` (T, E, ...) rearranged to (C, L, ...)."""
        return np.asarray(array[self.time, self.env[:, None]])

    def first(self, array: NDArray[Any]) -> NDArray[Any]:
        """``array`` (T, E, ...) at each chunk's first step: (C, ...)."""
        return np.asarray(array[self.time[:, 0], self.env])


class RolloutBuffer:
    """One rollout of ``length`` steps of ``info.num_envs`` env copies.

    The runner writes what the policy saw and did (``add``) and what came of it (``add_outcome``)
    at every step, then the observation the rollout stopped at (``finish``). The learner values
    every observation afterwards in one batched pass and hands the values back (``set_values``):
    the critic is not on the acting path.

    ``xp`` places the observations (``obs``, ``state``, ``final_*``, ``last_*``) where the env
    keeps them (``learners.envs.base.observation_ops``): NumPy on the host, or torch tensors on
    the learner's device, which then trains on them where they are. Everything else (actions,
    log-probabilities, rewards, flags, masks, values) is NumPy on the host, where the targets are
    computed. Recurrent policies train on host arrays only (``chunks`` gathers with NumPy).
    """

    def __init__(
        self, info: EnvInfo, length: int, hidden_size: int | None = None, xp: ArrayOps = NUMPY
    ) -> None:
        t, e, n = length, info.num_envs, info.num_agents
        discrete = info.action_kind == "discrete"
        self.info = info
        self.length = length
        self.obs = xp.zeros((t, e, n, info.obs_dim), xp.float32)
        self.state = xp.zeros((t, e, info.state_dim), xp.float32)
        self.agent_mask = np.zeros((t, e, n), np.float32)
        self.avail_actions = np.ones((t, e, n, info.action_dim if discrete else 0), np.float32)
        if discrete:
            self.actions: NDArray[Any] = np.zeros((t, e, n), np.int64)
        else:
            self.actions = np.zeros((t, e, n, info.action_dim), np.float32)
        self.log_prob = np.zeros((t, e, n), np.float32)
        self.rewards = np.zeros((t, e, n), np.float32)
        self.terminated = np.zeros((t, e), np.bool_)
        self.episode_end = np.zeros((t, e), np.bool_)
        self.final_obs = xp.zeros((t, e, n, info.obs_dim), xp.float32)
        """The last observation of each episode that ended at a step (else the next one)."""
        self.final_state = xp.zeros((t, e, info.state_dim), xp.float32)
        self.last_obs = xp.zeros((e, n, info.obs_dim), xp.float32)
        """The observation after the rollout's last step (what the rollout bootstraps from)."""
        self.last_state = xp.zeros((e, info.state_dim), xp.float32)
        self.values = np.zeros((t, e, n), np.float32)
        """The critic's raw outputs (normalised units when value normalisation is on)."""
        self.next_values = np.zeros((t, e, n), np.float32)
        """Raw critic outputs for what followed each step (``set_values`` fills it)."""
        self.hidden_size = hidden_size
        if hidden_size is not None:
            if xp is not NUMPY:
                raise ValueError("recurrent policies train on host arrays: no device rollout")
            self.actor_hidden = np.zeros((t, e, n, hidden_size), np.float32)
            """The actor's GRU state before each step."""
            self.critic_hidden = np.zeros((t, e, n, hidden_size), np.float32)
            """The critic's GRU state before each step (the learner's value pass fills it)."""
        self.step = 0

    @property
    def full(self) -> bool:
        return self.step == self.length

    def reset(self) -> None:
        """Start writing a new rollout (the arrays are overwritten, not reallocated)."""
        self.step = 0

    def add(self, observation: Observation, step: RolloutStep) -> None:
        """Record what the agents saw and did at the current step (before the env steps)."""
        t = self.step
        self.obs[t] = observation.obs
        self.state[t] = observation.state
        self.agent_mask[t] = observation.agent_mask
        if self.avail_actions.shape[-1]:
            self.avail_actions[t] = observation.avail_actions
        self.actions[t] = step.actions
        self.log_prob[t] = step.log_prob
        if step.hidden is not None:
            self.actor_hidden[t] = step.hidden

    def add_outcome(self, transition: Transition) -> None:
        """Record the step's rewards, episode ends and final observations; close the row."""
        t = self.step
        self.rewards[t] = transition.rewards
        self.terminated[t] = transition.terminated
        np.logical_or(transition.terminated, transition.truncated, out=self.episode_end[t])
        self.final_obs[t] = transition.final_obs
        self.final_state[t] = transition.final_state
        self.step += 1

    def finish(self, observation: Observation) -> None:
        """Record the observation the rollout stopped at."""
        self.last_obs[...] = observation.obs
        self.last_state[...] = observation.state

    def set_values(
        self,
        values: NDArray[Any],
        final_values: NDArray[Any],
        last_values: NDArray[Any],
    ) -> None:
        """Store the critic's raw values (T, E, N) of every step's observation, of every step's
        final observation (read only where an episode ended) and (E, N) of ``last_obs``; fill
        ``next_values``: the next row's value inside an episode, the final observation's value
        where an episode ended, ``last_values`` after the last step."""
        self.values[...] = values
        self.next_values[:-1] = values[1:]
        self.next_values[-1] = last_values
        np.copyto(self.next_values, final_values, where=self.episode_end[..., None])

    def chunks(self, chunk_length: int) -> Chunks:
        """Cut every env's steps into sequences of at most ``chunk_length`` that never cross an
        episode boundary; pad the short ones."""
        starts: list[tuple[int, int, int]] = []  # (env, first step, length)
        for env in range(self.info.num_envs):
            begin = 0
            for t in range(self.length):
                last_of_chunk = self.episode_end[t, env] or t - begin + 1 == chunk_length
                if last_of_chunk or t == self.length - 1:
                    starts.append((env, begin, t - begin + 1))
                    begin = t + 1
        offsets = np.arange(chunk_length)
        first = np.array([s[1] for s in starts], np.int64)
        size = np.array([s[2] for s in starts], np.int64)
        filled = offsets[None, :] < size[:, None]
        time = np.where(filled, first[:, None] + offsets[None, :], first[:, None])
        env_index = np.array([s[0] for s in starts], np.int64)
        return Chunks(time=time, env=env_index, filled=filled.astype(np.float32))
