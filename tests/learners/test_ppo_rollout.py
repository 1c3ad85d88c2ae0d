"""The rollout buffer: next values across episode ends, bootstrap, and recurrent chunking."""

from __future__ import annotations

import numpy as np
import pytest

from learners.buffers.rollout import RolloutBuffer, RolloutStep
from learners.envs.base import EnvInfo, Observation, Transition

E, N, OBS, ACT = 2, 3, 4, 5


def info(num_envs: int = E) -> EnvInfo:
    return EnvInfo(
        num_envs=num_envs, num_agents=N, agent_ids=("a", "b", "c"), teams=("agent",) * N,
        obs_dim=OBS,
        obs_dims=(OBS,) * N, state_dim=6, action_kind="discrete", action_dim=ACT,
        action_low=None, action_high=None, max_episode_steps=None,
    )  # fmt: skip


def observation(t: int) -> Observation:
    return Observation(
        obs=np.full((E, N, OBS), t, np.float32),
        obs_mask=np.ones((E, N, OBS), np.float32),
        state=np.full((E, 6), t, np.float32),
        agent_mask=np.ones((E, N), np.float32),
        avail_actions=np.ones((E, N, ACT), np.float32),
    )


def transition(terminated: list[bool], truncated: list[bool], final: float) -> Transition:
    return Transition(
        rewards=np.ones((E, N), np.float32),
        terminated=np.array(terminated),
        truncated=np.array(truncated),
        final_obs=np.full((E, N, OBS), final, np.float32),
        final_state=np.full((E, 6), final, np.float32),
        final_avail_actions=np.ones((E, N, ACT), np.float32),
        episode_returns=np.full(E, np.nan, np.float32),
        episode_lengths=np.zeros(E, np.int64),
        agent_returns=np.full((E, N), np.nan, np.float32),
    )


def fill(buffer: RolloutBuffer, ends: dict[int, tuple[list[bool], list[bool]]]) -> None:
    """Step t sees observation t; values are 10 * t, final-observation values -1 - t, and the
    value after the last step 999."""
    for t in range(buffer.length):
        step = RolloutStep(
            actions=np.zeros((E, N), np.int64), env_actions=np.zeros((E, N), np.int64),
            log_prob=np.zeros((E, N), np.float32),
            hidden=np.full((E, N, 2), t, np.float32) if buffer.hidden_size else None,
        )  # fmt: skip
        buffer.add(observation(t), step)
        term, trunc = ends.get(t, ([False] * E, [False] * E))
        buffer.add_outcome(transition(term, trunc, final=100 + t))
    buffer.finish(observation(buffer.length))
    steps = np.arange(buffer.length, dtype=np.float32)[:, None, None]
    values = np.broadcast_to(10.0 * steps, (buffer.length, E, N))
    final_values = np.broadcast_to(-1.0 - steps, (buffer.length, E, N))
    buffer.set_values(values, final_values, np.full((E, N), 999.0, np.float32))


def test_next_values_follow_episode_ends_and_bootstrap() -> None:
    buffer = RolloutBuffer(info(), 6)
    # env 0 is truncated at t=2, env 1 terminated at t=3; env 0 also ends at the last step.
    fill(buffer, {2: ([False, False], [True, False]), 3: ([False, True], [False, False]),
                  5: ([False, False], [True, False])})  # fmt: skip
    nv = buffer.next_values[:, :, 0]
    np.testing.assert_array_equal(nv[:, 0], [10, 20, -3, 40, 50, -6])
    np.testing.assert_array_equal(nv[:, 1], [10, 20, 30, -4, 50, 999])
    assert buffer.terminated[3, 1] and not buffer.terminated[2, 0]
    np.testing.assert_array_equal(buffer.episode_end[:, 0], [0, 0, 1, 0, 0, 1])
    # The final observations are kept per step; the observation after the last step too.
    assert buffer.final_obs[2, 0, 0, 0] == 102 and buffer.final_state[3, 1, 0] == 103
    assert buffer.last_obs[0, 0, 0] == 6 and buffer.last_state[1, 0] == 6
    assert buffer.full


def test_chunks_never_cross_an_episode_and_pad_the_rest() -> None:
    buffer = RolloutBuffer(info(), 10, hidden_size=2)
    fill(buffer, {3: ([False, False], [True, False])})
    chunks = buffer.chunks(4)
    pieces = sorted(
        (int(e), int(t[0]), int(f.sum()))
        for e, t, f in zip(chunks.env, chunks.time, chunks.filled, strict=True)
    )
    # env 0: [0..3] ends an episode, then [4..7], [8..9]; env 1: [0..3], [4..7], [8..9].
    assert pieces == [(0, 0, 4), (0, 4, 4), (0, 8, 2), (1, 0, 4), (1, 4, 4), (1, 8, 2)]
    for t, f in zip(chunks.time, chunks.filled, strict=True):
        real = t[f > 0]
        np.testing.assert_array_equal(real, np.arange(real[0], real[0] + len(real)))
    # Each chunk starts from the hidden state recorded at its first step.
    first_hidden = chunks.first(buffer.actor_hidden)
    np.testing.assert_array_equal(first_hidden[:, 0, 0], chunks.time[:, 0])
    gathered = chunks.gather(buffer.obs)
    assert gathered.shape == (6, 4, N, OBS)
    np.testing.assert_array_equal(gathered[..., 0, 0], np.where(chunks.filled > 0, chunks.time,
                                                                 chunks.time[:, :1]))  # fmt: skip


@pytest.mark.parametrize("length,chunk", [(7, 3), (25, 25), (5, 10)])
def test_chunks_cover_every_step_once(length: int, chunk: int) -> None:
    buffer = RolloutBuffer(info(), length, hidden_size=2)
    fill(buffer, {})
    chunks = buffer.chunks(chunk)
    rows = zip(chunks.env, chunks.time, chunks.filled, strict=True)
    covered = sorted(
        (int(e), int(t)) for e, ts, fs in rows for t, f in zip(ts, fs, strict=True) if f > 0
    )
    assert covered == [(e, t) for e in range(E) for t in range(length)]
