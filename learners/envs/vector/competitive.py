"""The catalogue's competitive MPE scenarios (adversaries first, then good agents) as array code:
simple_tag, simple_adversary and simple_push, each mirroring its mpe2 module."""

from __future__ import annotations

import numpy as np

from learners.envs.vector.arrays import Array, ops_of
from learners.envs.vector.scenarios import (
    Scenario,
    make_bodies,
    nearest,
    others_index,
    pick,
    put,
    relative,
)
from learners.envs.vector.world import Frame, distances


def _names(num_adversaries: int, num_good: int) -> tuple[str, ...]:
    return tuple(f"adversary_{i}" for i in range(num_adversaries)) + tuple(
        f"agent_{i}" for i in range(num_good)
    )


def _goal_pos(frame: Frame) -> Array:
    """(1, 2, E) each copy's goal landmark."""
    copies = frame.xp.arange(len(frame.goal))
    return frame.landmark_pos[frame.goal, :, copies].T[None]


def _out_of_bounds_penalty(pos: Array) -> Array:
    """simple_tag's ``bound``: 0 inside 0.9, linear to 1 at 1.0, then exp(2x - 2) capped at 10.
    (The exponent is capped first so far-off agents do not overflow; the result is the same.)"""
    xp = ops_of(pos)
    x = xp.abs(pos)
    outer = xp.clip(xp.exp(xp.clip(2 * x - 2, None, 3.0)), None, 10)
    return xp.where(x < 0.9, 0.0, xp.where(x < 1.0, (x - 0.9) * 10, outer))


class SimpleTag(Scenario):
    """Slower adversaries chase faster good agents around obstacles; +10 / -10 per catch."""

    landmark_range = 0.9

    def __init__(
        self,
        num_good: int = 1,
        num_adversaries: int = 3,
        num_obstacles: int = 2,
        curriculum: bool = False,
        terminate_on_success: bool = False,
        num_agent_neighbors: int | None = None,
        num_landmark_neighbors: int | None = None,
    ) -> None:
        adv, good = num_adversaries, num_good
        # Curriculum stage 0 (nothing advances it in a run) halves the prey's speed and accel.
        prey = 0.5 if curriculum else 1.0
        self.agent_ids = _names(adv, good)
        self.bodies = make_bodies(
            [0.075] * adv + [0.05] * good,
            [3.0] * adv + [4.0 * prey] * good,
            [1.0] * adv + [1.3 * prey] * good,
            True,
            [0.2] * num_obstacles,
            True,
        )
        self.agent_neighbors, self.landmark_neighbors = num_agent_neighbors, num_landmark_neighbors
        self.landmark_slots = (
            num_obstacles if num_landmark_neighbors is None else num_landmark_neighbors
        )
        self.agent_slots = adv + good - 1 if num_agent_neighbors is None else num_agent_neighbors
        common = 4 + 2 * self.landmark_slots + 2 * self.agent_slots
        if num_agent_neighbors is None:
            # Every agent sees the good agents' velocities (other than its own).
            self.obs_dims = (common + 2 * good,) * adv + (common + 2 * (good - 1),) * good
        else:
            # Each of the nearest agents' slots carries its velocity, zero for an adversary.
            self.obs_dims = (common + 2 * num_agent_neighbors,) * (adv + good)
        self.num_adversaries = adv
        self.terminate_on_success = terminate_on_success
        self._others = others_index(adv + good)
        self._good_others = adv + others_index(good)
        self._other_is_good = (self._others >= adv)[:, :, None, None]

    def observe(self, frame: Frame, out: Array) -> None:
        adv, pos, vel = self.num_adversaries, frame.agent_pos, frame.agent_vel
        out[:, 0:2] = vel
        out[:, 2:4] = pos
        landmarks = relative(frame.landmark_pos, pos)
        landmarks = pick(landmarks, nearest(landmarks, self.landmark_neighbors))
        start = put(out, 4, landmarks, self.landmark_slots)
        others = relative(pos[self._others], pos)
        order = nearest(others, self.agent_neighbors)
        start = put(out, start, pick(others, order), self.agent_slots)
        if order is not None:
            other_vel = frame.xp.where(self._other_is_good, vel[self._others], 0.0)
            put(out, start, pick(other_vel, order), self.agent_slots)
            return
        good = len(self.agent_ids) - adv
        put(out, start, vel[None, adv:], good, slice(None, adv))
        put(out, start, vel[self._good_others], good - 1, slice(adv, None))

    def _caught(self, frame: Frame) -> Array:
        """(adversaries, good, E) which adversary touches which good agent."""
        adv, size = self.num_adversaries, self.bodies.agent_size
        dist = distances(frame.agent_pos[:adv], frame.agent_pos[adv:])
        return dist < (size[:adv, None] + size[None, adv:])[:, :, None]

    def rewards(self, frame: Frame) -> Array:
        adv, caught = self.num_adversaries, self._caught(frame)
        rewards = frame.xp.empty(frame.agent_pos[:, 0].shape, frame.xp.float64)
        rewards[:adv] = 10.0 * caught.sum(axis=(0, 1))[None]
        penalty = _out_of_bounds_penalty(frame.agent_pos[adv:])
        rewards[adv:] = -10.0 * caught.sum(axis=0) - penalty[:, 0] - penalty[:, 1]
        return rewards

    def is_terminal(self, frame: Frame) -> Array:
        if not self.terminate_on_success:
            return super().is_terminal(frame)
        return self._caught(frame).any(axis=0).all(axis=0)


class SimpleAdversary(Scenario):
    """One adversary and N good agents near N landmarks; only the good agents know the goal."""

    draws_goal = True

    def __init__(
        self,
        N: int = 2,
        num_agent_neighbors: int | None = None,
        num_landmark_neighbors: int | None = None,
    ) -> None:
        self.agent_ids = _names(1, N)
        agents = N + 1
        self.bodies = make_bodies(
            [0.15] * agents, [5.0] * agents, [np.inf] * agents, False, [0.08] * N, False
        )
        self.agent_neighbors, self.landmark_neighbors = num_agent_neighbors, num_landmark_neighbors
        self.landmark_slots = N if num_landmark_neighbors is None else num_landmark_neighbors
        self.agent_slots = N if num_agent_neighbors is None else num_agent_neighbors
        seen = 2 * (self.landmark_slots + self.agent_slots)
        # Good agents also see the goal (always, whatever they see of the rest).
        self.obs_dims = (seen,) + (2 + seen,) * N
        self._others = others_index(agents)

    def observe(self, frame: Frame, out: Array) -> None:
        pos = frame.agent_pos
        landmarks = relative(frame.landmark_pos, pos)
        landmarks = pick(landmarks, nearest(landmarks, self.landmark_neighbors))
        others = relative(pos[self._others], pos)
        others = pick(others, nearest(others, self.agent_neighbors))
        end = put(out[:1], 0, landmarks[:1], self.landmark_slots)
        put(out[:1], end, others[:1], self.agent_slots)
        out[1:, 0:2] = _goal_pos(frame) - pos[1:]
        end = put(out[1:], 2, landmarks[1:], self.landmark_slots)
        put(out[1:], end, others[1:], self.agent_slots)

    def rewards(self, frame: Frame) -> Array:
        to_goal = distances(frame.agent_pos, _goal_pos(frame))[:, 0]
        rewards = frame.xp.empty(to_goal.shape, frame.xp.float64)
        rewards[0] = -to_goal[0]
        rewards[1:] = (-frame.xp.amin(to_goal[1:], axis=0) + to_goal[0])[None]
        return rewards


# simple_push colours: landmark i is grey with +0.8 on channel i + 1; the good agent is grey with
# +0.5 on its goal's channel (mpe2 computes them so, and they are part of its observation).
_LANDMARK_COLORS = np.array([[0.1, 0.1 + 0.8, 0.1], [0.1, 0.1, 0.1 + 0.8]])
_AGENT_COLORS = np.array([[0.25, 0.25 + 0.5, 0.25], [0.25, 0.25, 0.25 + 0.5]])
_LANDMARK_COLORS_COLUMN = _LANDMARK_COLORS.reshape(-1, 1)


class SimplePush(Scenario):
    """One adversary keeps one good agent away from its goal landmark."""

    draws_goal = True

    def __init__(self) -> None:
        self.agent_ids = _names(1, 1)
        self.bodies = make_bodies([0.05] * 2, [5.0] * 2, [np.inf] * 2, True, [0.05] * 2, False)
        self.obs_dims = (8, 19)

    def observe(self, frame: Frame, out: Array) -> None:
        pos, vel, xp = frame.agent_pos, frame.agent_vel, frame.xp
        landmarks = relative(frame.landmark_pos, pos).reshape(2, 4, -1)
        out[:, 0:2] = vel
        out[0, 2:6] = landmarks[0]
        out[0, 6:8] = pos[1] - pos[0]
        out[1, 2:4] = _goal_pos(frame)[0] - pos[1]
        out[1, 4:7] = xp.const(_AGENT_COLORS)[frame.goal].T
        out[1, 7:11] = landmarks[1]
        out[1, 11:17] = xp.const(_LANDMARK_COLORS_COLUMN)
        out[1, 17:19] = pos[0] - pos[1]

    def rewards(self, frame: Frame) -> Array:
        to_goal = distances(frame.agent_pos, _goal_pos(frame))[:, 0]
        rewards = frame.xp.empty(to_goal.shape, frame.xp.float64)
        rewards[1] = -to_goal[1]
        rewards[0] = to_goal[1] - to_goal[0]
        return rewards
