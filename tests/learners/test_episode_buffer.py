"""The episode replay buffer: staging per env copy, padding and ``filled``, truncation's final
observation, termination flags, the ring, sampling, and the checkpoint round trip."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from learners.buffers.episodes import EpisodeBatch, EpisodeBuffer
from learners.envs.base import EnvInfo, Observation, Transition
from learners.envs.factory import make_vec_env
from learners.runners.off_policy import random_actions
from learners.spec import EnvSpec

E, N, D, S, A, LIMIT = 2, 3, 4, 5, 6, 4


def info(num_envs: int = E) -> EnvInfo:
    return EnvInfo(
        num_envs=num_envs, num_agents=N, agent_ids=tuple(f"a{i}" for i in range(N)),
        teams=("agent",) * N, obs_dim=D,
        obs_dims=(D,) * N, state_dim=S, action_kind="discrete", action_dim=A, action_low=None,
        action_high=None, max_episode_steps=LIMIT,
    )  # fmt: skip


def observation(value: float) -> Observation:
    """Every entry of every copy tagged with ``value`` + the copy's index."""
    tag = value + np.arange(E, dtype=np.float32)
    return Observation(
        obs=np.broadcast_to(tag[:, None, None], (E, N, D)).copy(),
        obs_mask=np.ones((E, N, D), np.float32),
        state=np.broadcast_to(tag[:, None], (E, S)).copy(),
        agent_mask=np.ones((E, N), np.float32),
        avail_actions=np.ones((E, N, A), np.float32),
    )


def transition(step: int, terminated: list[bool], truncated: list[bool]) -> Transition:
    final = observation(100.0 + step)  # recognisable final observations
    return Transition(
        rewards=np.full((E, N), float(step), np.float32),
        terminated=np.array(terminated),
        truncated=np.array(truncated),
        final_obs=final.obs,
        final_state=final.state,
        final_avail_actions=final.avail_actions,
        episode_returns=np.zeros(E, np.float32),
        episode_lengths=np.zeros(E, np.int64),
        agent_returns=np.zeros((E, N), np.float32),
    )


def play(buffer: EpisodeBuffer, ends: list[tuple[list[bool], list[bool]]]) -> None:
    """Step both copies through ``ends`` (terminated, truncated per step); step k's observation
    is tagged 10 * k."""
    for k, (terminated, truncated) in enumerate(ends):
        actions = np.full((E, N), k % A, np.int64)
        buffer.add(observation(10.0 * k), actions, transition(k, terminated, truncated))


# Copy 1 terminates after 2 steps, then copy 0 is truncated at the limit (4 steps) and copy 1
# again after 2 more (its second episode).
ENDS = [
    ([False, False], [False, False]),
    ([False, True], [False, False]),
    ([False, False], [False, False]),
    ([False, False], [True, True]),
]


def test_episodes_are_committed_when_they_end_padded_with_filled_marking_real_steps() -> None:
    buffer = EpisodeBuffer(info(), capacity=10)
    play(buffer, ENDS)
    assert buffer.size == 3
    batch = buffer.sample(3, np.random.default_rng(0))
    assert sorted(batch.filled.sum(1).tolist()) == [2.0, 2.0, 4.0]
    # In commit order: copy 1's first episode, copy 0's, copy 1's second.
    data = buffer.state()
    first, whole, second = (data["episodes/obs"][i, :, 0, 0] for i in range(3))
    np.testing.assert_array_equal(first, [1, 11, 102, 0, 0])  # 2 steps, final obs, padding
    np.testing.assert_array_equal(whole, [0, 10, 20, 30, 103])  # truncated at the limit
    np.testing.assert_array_equal(second, [21, 31, 104, 0, 0])
    np.testing.assert_array_equal(data["episodes/filled"][0], [1, 1, 0, 0])
    np.testing.assert_array_equal(data["episodes/rewards"][1, :, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(data["episodes/actions"][2, :, 0], [2, 3, 0, 0])
    np.testing.assert_array_equal(data["episodes/state"][1, -1], np.full(S, 103.0))


def test_only_a_true_end_is_terminated() -> None:
    buffer = EpisodeBuffer(info(), capacity=10)
    play(buffer, ENDS)
    terminated = buffer.state()["episodes/terminated"]
    np.testing.assert_array_equal(terminated[0], [0, 1, 0, 0])  # terminated at its second step
    np.testing.assert_array_equal(terminated[1], [0, 0, 0, 0])  # truncated: bootstraps
    np.testing.assert_array_equal(terminated[2], [0, 0, 0, 0])


def test_the_ring_overwrites_the_oldest_episode() -> None:
    buffer = EpisodeBuffer(info(), capacity=2)
    play(buffer, ENDS)
    data = buffer.state()
    assert buffer.size == 2 and int(data["episodes/position"]) == 1
    # Slot 0 now holds copy 1's second episode; slot 1 still copy 0's.
    np.testing.assert_array_equal(data["episodes/obs"][:, 0, 0, 0], [21, 0])


def test_an_episode_past_the_limit_is_refused() -> None:
    buffer = EpisodeBuffer(info(), capacity=4)
    never = ([False, False], [False, False])
    play(buffer, [never] * LIMIT)
    with pytest.raises(ValueError, match="episode limit"):
        play(buffer, [never])


def test_sample_shapes_and_distinct_episodes() -> None:
    buffer = EpisodeBuffer(info(), capacity=10)
    play(buffer, ENDS * 3)
    batch = buffer.sample(buffer.size, np.random.default_rng(1))
    assert isinstance(batch, EpisodeBatch)
    b = buffer.size
    expected = {
        "obs": (b, LIMIT + 1, N, D), "state": (b, LIMIT + 1, S),
        "avail_actions": (b, LIMIT + 1, N, A),
        "actions": (b, LIMIT, N), "rewards": (b, LIMIT, N), "agent_mask": (b, LIMIT, N),
        "terminated": (b, LIMIT), "filled": (b, LIMIT),
    }  # fmt: skip
    assert {f.name: getattr(batch, f.name).shape for f in fields(EpisodeBatch)} == expected
    assert batch.actions.dtype == np.int64
    # Without replacement: a batch of every stored episode holds each exactly once.
    stored = buffer.state()["episodes/obs"][:, :, 0, 0]
    assert sorted(map(tuple, batch.obs[:, :, 0, 0])) == sorted(map(tuple, stored))
    with pytest.raises(ValueError, match="cannot sample"):
        buffer.sample(b + 1, np.random.default_rng(1))


def test_state_round_trip_resumes_exactly() -> None:
    buffer = EpisodeBuffer(info(), capacity=3)
    play(buffer, ENDS * 2)
    twin = EpisodeBuffer(info(), capacity=3)
    twin.load_state({k: v.copy() for k, v in buffer.state().items()})
    # Both continue from an episode boundary with the same episodes and write position.
    play(buffer, ENDS)
    play(twin, ENDS)
    for name, value in buffer.state().items():
        np.testing.assert_array_equal(twin.state()[name], value, err_msg=name)
    a, b = (x.sample(2, np.random.default_rng(7)) for x in (buffer, twin))
    for field in fields(EpisodeBatch):
        np.testing.assert_array_equal(getattr(a, field.name), getattr(b, field.name))


def test_a_checkpoint_of_another_shape_is_refused() -> None:
    buffer = EpisodeBuffer(info(), capacity=3)
    play(buffer, ENDS)
    state = buffer.state()
    state["episodes/obs"] = state["episodes/obs"][:, :-1]
    with pytest.raises(ValueError, match="episodes/obs"):
        EpisodeBuffer(info(), capacity=3).load_state(state)


def test_stored_episodes_replay_what_the_env_showed() -> None:
    spec = EnvSpec(suite="mpe", id="simple_spread_v3", num_envs=2, kwargs={"max_cycles": 5})
    env = make_vec_env(spec, 0)
    buffer = EpisodeBuffer(env.info, capacity=8)
    rng = np.random.default_rng(0)
    obs = env.reset()
    seen = []
    for _ in range(5):
        actions = random_actions(env.info, obs, rng)
        seen.append(obs.obs.copy())
        next_obs, step = env.step(actions)
        buffer.add(obs, actions, step)
        obs = next_obs
    env.close()
    assert buffer.size == 2  # both copies truncated at max_cycles, committed in copy order
    stored = buffer.state()["episodes/obs"]
    for copy in range(2):
        np.testing.assert_array_equal(stored[copy, :5], np.stack(seen)[:, copy])
        np.testing.assert_array_equal(stored[copy, 5], step.final_obs[copy])
        assert not np.array_equal(stored[copy, 5], obs.obs[copy])  # not the next episode's start
