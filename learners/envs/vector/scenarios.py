"""The scenario interface, the helpers every scenario's observation uses, and simple_spread.

A scenario class mirrors one mpe2 scenario module (``mpe2/<scenario>/<scenario>.py``): the same
agent order and names, the same observation layout (padded to the widest agent, padding left zero),
the same rewards and ends, written over a ``Frame`` (agents first, copies last). Code branches only
on agent *types* (adversaries, good agents), never loops over agents or copies. The competitive
scenarios are in ``competitive.py``. A scenario is built with NumPy constants; ``on(xp)`` gives
the same scenario with its constants in another array library (``arrays.py``).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

import numpy as np
from numpy.typing import NDArray

from learners.envs.vector.arrays import NUMPY, Array, ArrayOps, ops_of
from learners.envs.vector.world import I64, Bodies, Frame, distances, on

F32 = NDArray[np.float32]
DIM_C = 2


def others_index(num: int) -> I64:
    """(num, num - 1): for each agent, the other agents' indices in order."""
    index = np.arange(num)
    others: I64 = np.stack([np.delete(index, i) for i in range(num)]).reshape(num, num - 1)
    return others


def relative(points: Array, origin: Array) -> Array:
    """(A, K, 2, E): ``points`` (K, 2, E) or (A, K, 2, E) seen from each agent at ``origin``
    (A, 2, E)."""
    if points.ndim == 3:
        points = points[None]
    return points - origin[:, None]


def nearest(rel: Array, n: int | None) -> Array | None:
    """mpe2's partial observability (``_mpe_utils/partial_observability.py``): the indices
    (A, min(n, K), E) of the ``n`` entities nearest each agent, nearest first (a stable sort of
    the distances, as mpe2's small-array argsort is), from their positions ``rel`` (A, K, 2, E)
    relative to it; ``None`` when ``n`` is ``None`` (every entity, in order)."""
    if n is None:
        return None
    xp = ops_of(rel)
    dist = xp.sqrt(xp.square(rel[:, :, 0]) + xp.square(rel[:, :, 1]))
    return xp.argsort_stable(dist, axis=1)[:, :n]


def pick(values: Array, order: Array | None) -> Array:
    """``values`` (A, K, 2, E) in the order ``nearest`` chose (all of them for ``None``)."""
    if order is None:
        return values
    return ops_of(values).take_along_axis(values, order[:, :, None, :], axis=1)


def put(out: Array, start: int, block: Array, slots: int, agents: slice = slice(None)) -> int:
    """Write ``block`` (A', K, 2, E) flat into ``out[agents]`` (A', obs_dim, E) at ``start``;
    returns where the next block starts, ``slots`` entities on (unfilled slots stay zero: mpe2's
    padding)."""
    a, k, dim, e = block.shape
    out[agents, start : start + k * dim] = block.reshape(a, k * dim, e)
    return start + 2 * slots


def make_bodies(
    sizes: list[float],
    accels: list[float],
    max_speeds: list[float],
    agents_collide: bool,
    landmark_sizes: list[float],
    landmarks_collide: bool,
) -> Bodies:
    return Bodies(
        agent_size=np.array(sizes, np.float64),
        agent_accel=np.array(accels, np.float64),
        agent_max_speed=np.array(max_speeds, np.float64),
        agent_collide=np.full(len(sizes), agents_collide),
        landmark_size=np.array(landmark_sizes, np.float64),
        landmark_collide=np.full(len(landmark_sizes), landmarks_collide),
    )


class Scenario(ABC):
    """One scenario's fixed description and its per-step functions."""

    agent_ids: tuple[str, ...]
    bodies: Bodies
    obs_dims: tuple[int, ...]
    landmark_range: float = 1.0
    """Landmarks start uniform in [-landmark_range, landmark_range]^2 (agents in [-1, 1]^2)."""
    draws_goal: bool = False
    """Whether reset draws a goal landmark (before the positions, as mpe2 does)."""
    local_ratio: float | None = None

    def on(self, xp: ArrayOps) -> Scenario:
        """This scenario with its arrays (bodies and per-scenario constants) in ``xp``'s library."""
        if xp is NUMPY:
            return self
        moved = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray):
                setattr(moved, name, xp.asarray(value))
        moved.bodies = on(self.bodies, xp)
        return moved

    @abstractmethod
    def observe(self, frame: Frame, out: Array) -> None:
        """Write every agent's observation into ``out`` (A, obs_dim, E); padding stays zero."""

    @abstractmethod
    def rewards(self, frame: Frame) -> Array:
        """(A, E) each agent's reward for the step that led to ``frame``."""

    def is_terminal(self, frame: Frame) -> Array:
        """(E,) whether the scenario itself ends the episode (``terminate_on_success``)."""
        return frame.xp.zeros(frame.steps.shape, frame.xp.bool_)


class SimpleSpread(Scenario):
    """N agents cover N landmarks; shared distance reward, local collision penalty."""

    CAPTURE_RADIUS = 0.1

    def __init__(
        self,
        N: int = 3,
        local_ratio: float = 0.5,
        curriculum: bool = False,
        terminate_on_success: bool = False,
        num_agent_neighbors: int | None = None,
        num_landmark_neighbors: int | None = None,
    ) -> None:
        self.agent_ids = tuple(f"agent_{i}" for i in range(N))
        self.bodies = make_bodies([0.15] * N, [5.0] * N, [np.inf] * N, True, [0.05] * N, False)
        self.agent_neighbors, self.landmark_neighbors = num_agent_neighbors, num_landmark_neighbors
        self.landmark_slots = N if num_landmark_neighbors is None else num_landmark_neighbors
        self.agent_slots = N - 1 if num_agent_neighbors is None else num_agent_neighbors
        # Each other agent seen also brings its communication (zeros: the agents are silent).
        self.obs_dims = (4 + 2 * self.landmark_slots + (2 + DIM_C) * self.agent_slots,) * N
        self.local_ratio = local_ratio
        # Curriculum stage 0 (the only one a run reaches: nothing advances it) has no penalty.
        self.collision_penalty = not curriculum
        self.terminate_on_success = terminate_on_success
        self._others = others_index(N)
        self._not_self = ~np.eye(N, dtype=np.bool_)

    def observe(self, frame: Frame, out: Array) -> None:
        pos = frame.agent_pos
        out[:, 0:2] = frame.agent_vel
        out[:, 2:4] = pos
        landmarks = relative(frame.landmark_pos, pos)
        landmarks = pick(landmarks, nearest(landmarks, self.landmark_neighbors))
        start = put(out, 4, landmarks, self.landmark_slots)
        others = relative(pos[self._others], pos)
        put(out, start, pick(others, nearest(others, self.agent_neighbors)), self.agent_slots)
        # The rest is the other agents' communication: silent agents send zeros.

    def rewards(self, frame: Frame) -> Array:
        xp = frame.xp
        to_landmarks = distances(frame.agent_pos, frame.landmark_pos)
        global_reward = -xp.amin(to_landmarks, axis=0).sum(axis=0)
        local = xp.zeros(frame.agent_pos[:, 0].shape, xp.float64)
        if self.collision_penalty:
            size = self.bodies.agent_size
            touching = size[:, None] + size[None, :]
            collide = distances(frame.agent_pos, frame.agent_pos) < touching[:, :, None]
            local = -xp.astype((collide & self._not_self[:, :, None]).sum(axis=1), xp.float64)
        assert self.local_ratio is not None
        shared = global_reward[None] * (1 - self.local_ratio)
        return shared + local * self.local_ratio

    def is_terminal(self, frame: Frame) -> Array:
        if not self.terminate_on_success:
            return super().is_terminal(frame)
        to_landmarks = distances(frame.agent_pos, frame.landmark_pos)
        return (frame.xp.amin(to_landmarks, axis=0) < self.CAPTURE_RADIUS).all(axis=0)
