"""The on-policy rollout buffer: preallocated NumPy arrays shaped (T, E, N, ...).

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


@dataclass(frozen=True)
class RolloutStep:
    """What a policy did at one rollout step, for every copy and agent (host-side NumPy)."""

    actions: NDArray[Any]
    """The sampled actions, as their log-probabilities were computed (unclipped Gaussians)."""
    env_actions: NDArray[Any]
    """What the env receives: continuous actions clipped to [-1, 1]."""
    log_prob: NDArray[np.float32]
    """(E, N)"""
    values: NDArray[np.float32]
    """(E, N) the critic's raw outputs (normalised units with value normalisation)."""
    hidden: tuple[NDArray[np.float32], NDArray[np.float32]] | None
    """Recurrent policies: the actor's and critic's GRU states (E, N, H) *before* this step."""


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
        return array[self.time, self.env[:, None]]

    def first(self, array: NDArray[Any]) -> NDArray[Any]:
        """``array`` (T, E, ...) at each chunk's first step: (C, ...)."""
        return array[self.time[:, 0], self.env]


class RolloutBuffer:
    """One rollout of ``length`` steps of ``info.num_envs`` env copies."""

    def __init__(self, info: EnvInfo, length: int, hidden_size: int | None = None) -> None:
        t, e, n = length, info.num_envs, info.num_agents
        discrete = info.action_kind == "discrete"
        self.info = info
        self.length = length
        self.obs = np.zeros((t, e, n, info.obs_dim), np.float32)
        self.state = np.zeros((t, e, info.state_dim), np.float32)
        self.agent_mask = np.zeros((t, e, n), np.float32)
        self.avail_actions = np.ones((t, e, n, info.action_dim if discrete else 0), np.float32)
        if discrete:
            self.actions: NDArray[Any] = np.zeros((t, e, n), np.int64)
        else:
            self.actions = np.zeros((t, e, n, info.action_dim), np.float32)
        self.log_prob = np.zeros((t, e, n), np.float32)
        self.values = np.zeros((t, e, n), np.float32)
        """The critic's raw outputs (normalised units when value normalisation is on)."""
        self.final_values = np.zeros((t, e, n), np.float32)
        """Raw critic outputs for the final observation of episodes that ended at a step."""
        self.next_values = np.zeros((t, e, n), np.float32)
        """Raw critic outputs for what followed each step (filled by ``finish``)."""
        self.rewards = np.zeros((t, e, n), np.float32)
        self.terminated = np.zeros((t, e), np.bool_)
        self.episode_end = np.zeros((t, e), np.bool_)
        self.hidden_size = hidden_size
        if hidden_size is not None:
            self.actor_hidden = np.zeros((t, e, n, hidden_size), np.float32)
            self.critic_hidden = np.zeros((t, e, n, hidden_size), np.float32)
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
        self.values[t] = step.values
        if step.hidden is not None:
            self.actor_hidden[t], self.critic_hidden[t] = step.hidden

    def add_outcome(self, transition: Transition, final_values: NDArray[Any] | None) -> None:
        """Record the step's rewards and episode ends, and close the row. ``final_values`` are the
        critic's raw values (E, N) of ``transition.final_obs``; they are needed (and read) only
        where an episode ended, and may be None when none did."""
        t = self.step
        self.rewards[t] = transition.rewards
        self.terminated[t] = transition.terminated
        np.logical_or(transition.terminated, transition.truncated, out=self.episode_end[t])
        if final_values is not None:
            self.final_values[t] = final_values
        self.step += 1

    def finish(self, bootstrap_values: NDArray[Any]) -> None:
        """Close the rollout with the critic's raw values (E, N) of the observation after its last
        step, and fill ``next_values``: the next row's value inside an episode, the final
        observation's value where an episode ended, ``bootstrap_values`` after the last step."""
        self.next_values[:-1] = self.values[1:]
        self.next_values[-1] = bootstrap_values
        np.copyto(self.next_values, self.final_values, where=self.episode_end[..., None])

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
