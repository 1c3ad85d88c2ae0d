"""The MPE world as arrays: every copy's bodies in one set of arrays, stepped at once.

The physics is mpe2's ``World.step`` (``mpe2/_mpe_utils/core.py``) written over an env axis:
action forces, soft contact forces between every pair of colliding bodies, then semi-implicit Euler
with damping and a speed cap. Landmarks never move in the scenarios we serve, so only agents are
integrated, and a landmark only pushes. The arithmetic keeps mpe2's order of operations (the force
sum runs over the other bodies in index order, starting from the action force) so the two engines
agree to rounding, not just in distribution.

The step computes in a ``Frame``, whose env axis is the last one: every array operation then runs
over all copies in one inner loop, where an env axis in front would leave NumPy a loop of two or
three elements per copy (about ten times slower at 4,096 copies). A frame's arrays are NumPy arrays
or torch tensors on one device (``arrays.py``); the step calls the operations of their library.
The world stays in float64, as mpe2 computes it, on either.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from learners.envs.vector.arrays import NUMPY, Array, ArrayOps, ops_of

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

DT = 0.1
DAMPING = 0.25
CONTACT_FORCE = 1e2
CONTACT_MARGIN = 1e-3
# mpe2's discrete actions: no-op, left, right, down, up (``SimpleEnv._set_action``).
DISCRETE_DIRECTIONS = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], np.float64)
MOVE_ACTIONS = 5


@dataclass
class WorldState:
    """Everything that changes during an episode, for E copies with A agents and L landmarks."""

    agent_pos: F64
    """(E, A, 2)"""
    agent_vel: F64
    """(E, A, 2)"""
    landmark_pos: F64
    """(E, L, 2)"""
    goal: I64
    """(E,) the index of the goal landmark (simple_adversary, simple_push; 0 elsewhere)."""
    steps: I64
    """(E,) steps taken in the current episode."""

    def copy(self) -> WorldState:
        return replace(
            self,
            agent_pos=self.agent_pos.copy(),
            agent_vel=self.agent_vel.copy(),
            landmark_pos=self.landmark_pos.copy(),
            goal=self.goal.copy(),
            steps=self.steps.copy(),
        )


@dataclass
class Frame:
    """The world state as the step computes it: coordinates before the env axis, which is last.
    Its arrays belong to one library and device, whose operations are ``xp``."""

    agent_pos: Array
    """(A, 2, E) float64"""
    agent_vel: Array
    """(A, 2, E) float64"""
    landmark_pos: Array
    """(L, 2, E) float64"""
    goal: Array
    """(E,) int64"""
    steps: Array
    """(E,) int64"""
    xp: ArrayOps = NUMPY

    @classmethod
    def zeros(cls, agents: int, landmarks: int, copies: int, xp: ArrayOps = NUMPY) -> Frame:
        """A frame of ``copies`` worlds with every body at the origin, at rest."""
        return cls(
            agent_pos=xp.zeros((agents, 2, copies), xp.float64),
            agent_vel=xp.zeros((agents, 2, copies), xp.float64),
            landmark_pos=xp.zeros((landmarks, 2, copies), xp.float64),
            goal=xp.zeros((copies,), xp.int64),
            steps=xp.zeros((copies,), xp.int64),
            xp=xp,
        )

    @classmethod
    def of(cls, state: WorldState, xp: ArrayOps = NUMPY) -> Frame:
        """A frame holding a copy of ``state`` in ``xp``'s arrays."""

        def env_last(array: F64) -> Array:
            return xp.asarray(np.ascontiguousarray(array.transpose(1, 2, 0), np.float64))

        return cls(
            agent_pos=env_last(state.agent_pos),
            agent_vel=env_last(state.agent_vel),
            landmark_pos=env_last(state.landmark_pos),
            goal=xp.asarray(np.array(state.goal, np.int64)),
            steps=xp.asarray(np.array(state.steps, np.int64)),
            xp=xp,
        )

    def state(self) -> WorldState:
        """A copy of the frame as a ``WorldState`` of NumPy arrays."""
        host = self.xp.to_numpy

        def env_first(array: Array) -> F64:
            return np.ascontiguousarray(host(array).transpose(2, 0, 1))

        return WorldState(
            agent_pos=env_first(self.agent_pos),
            agent_vel=env_first(self.agent_vel),
            landmark_pos=env_first(self.landmark_pos),
            goal=np.array(host(self.goal)),
            steps=np.array(host(self.steps)),
        )


@dataclass(frozen=True)
class Bodies:
    """The fixed properties of a scenario's bodies (mpe2's ``make_world``), agents first."""

    agent_size: F64
    agent_accel: F64
    """(A,) mpe2's ``accel``, 5.0 where the scenario leaves it unset."""
    agent_max_speed: F64
    """(A,) ``inf`` where the scenario sets no cap."""
    agent_collide: BoolArray
    landmark_size: F64
    landmark_collide: BoolArray
    # Derived once: the colliding pairs (each unordered pair once, its first body an agent) and
    # where each pair's force lands, so a step computes every contact once and spends no calls on
    # fixed quantities.
    colliding_agents: I64 = field(init=False)
    """(Ac,) the agents that feel contact forces."""
    colliding_bodies: I64 = field(init=False)
    """(Oc,) the bodies that push (agents, then landmarks; one index space)."""
    pair_first: I64 = field(init=False)
    """(P,) each pair's agent (a body index below ``pair_second``)."""
    pair_second: I64 = field(init=False)
    pair_dist_min: F64 = field(init=False)
    """(P,) the sum of the pair's sizes."""
    pair_cells: tuple[I64, I64] = field(init=False)
    """Where each pair's force on its first body goes in the (Ac, Oc) table of forces."""
    mirror_pairs: I64 = field(init=False)
    """The pairs whose second body is an agent too: it feels the opposite force."""
    mirror_cells: tuple[I64, I64] = field(init=False)
    capped: bool = field(init=False)

    def __post_init__(self) -> None:
        collide = np.concatenate([self.agent_collide, self.landmark_collide])
        agents, others = np.flatnonzero(self.agent_collide), np.flatnonzero(collide)
        sizes = np.concatenate([self.agent_size, self.landmark_size])
        row = {int(a): r for r, a in enumerate(agents)}
        col = {int(b): c for c, b in enumerate(others)}
        pairs = [(int(a), int(b)) for a in agents for b in others if b > a]
        first = np.array([a for a, _ in pairs], np.int64)
        second = np.array([b for _, b in pairs], np.int64)
        mirror = np.array([k for k, (_, b) in enumerate(pairs) if b in row], np.int64)
        derived = {
            "colliding_agents": agents,
            "colliding_bodies": others,
            "pair_first": first,
            "pair_second": second,
            "pair_dist_min": sizes[first] + sizes[second],
            "pair_cells": (
                np.array([row[a] for a, _ in pairs], np.int64),
                np.array([col[b] for _, b in pairs], np.int64),
            ),
            "mirror_pairs": mirror,
            "mirror_cells": (
                np.array([row[pairs[k][1]] for k in mirror], np.int64),
                np.array([col[pairs[k][0]] for k in mirror], np.int64),
            ),
            "capped": bool(np.isfinite(self.agent_max_speed).any()),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def num_agents(self) -> int:
        return len(self.agent_size)

    @property
    def num_landmarks(self) -> int:
        return len(self.landmark_size)


def on(bodies: Bodies, xp: ArrayOps) -> Bodies:
    """``bodies`` with its arrays in ``xp``'s library (itself for NumPy)."""
    if xp is NUMPY:
        return bodies
    moved = object.__new__(Bodies)
    for name, value in vars(bodies).items():
        if isinstance(value, np.ndarray):
            value = xp.asarray(value)
        elif isinstance(value, tuple):
            value = tuple(xp.asarray(v) for v in value)
        object.__setattr__(moved, name, value)
    return moved


def action_force(bodies: Bodies, actions: Array, continuous: bool, xp: ArrayOps) -> Array:
    """(A, 2, E) the force each agent's action applies: mpe2's ``_set_action`` (times ``accel``).

    ``actions`` are (E, A) integers or (E, A, 5) in mpe2's own ``Box(0, 1, (5,))`` (clipped to it,
    as mpe2's wrapper does): the x force is ``a[2] - a[1]`` and the y force ``a[4] - a[3]``,
    differenced in the actions' own dtype before widening, as mpe2 does.
    """
    if continuous:
        clipped = xp.clip(xp.asarray(actions), 0, 1)
        difference = clipped[..., 2::2] - clipped[..., 1::2]
        direction = xp.permute(xp.astype(difference, xp.float64), (1, 2, 0))
    else:
        chosen = xp.asarray(actions, xp.int64).T
        direction = xp.permute(xp.const(DISCRETE_DIRECTIONS.T)[:, chosen], (1, 0, 2))
    return direction * bodies.agent_accel[:, None, None]


def contact_forces(bodies: Bodies, frame: Frame, force: Array) -> None:
    """Add to ``force`` (A, 2, E) the soft contact force on each colliding agent from every other
    colliding body (mpe2's ``get_collision_force``), summed over bodies in index order.

    Each pair is computed once; the second body, when an agent, gets the exact negation (as in
    mpe2, where the pair's force is negated for it)."""
    xp, agents = frame.xp, bodies.colliding_agents
    if len(bodies.pair_first) == 0:
        return
    bodies_pos = frame.agent_pos
    if len(bodies.landmark_size):
        bodies_pos = xp.concatenate([frame.agent_pos, frame.landmark_pos])
    delta = bodies_pos[bodies.pair_first] - bodies_pos[bodies.pair_second]
    dist = xp.sqrt(xp.square(delta[:, 0]) + xp.square(delta[:, 1]))
    overlap = -(dist - bodies.pair_dist_min[:, None]) / CONTACT_MARGIN
    penetration = xp.softplus(overlap) * CONTACT_MARGIN
    pair_force = CONTACT_FORCE * delta / dist[:, None] * penetration[:, None]
    # The table of forces on each colliding agent from each colliding body, bodies first so the
    # sum runs over whole slices in index order after the action force, as mpe2 accumulates it
    # (the zeros of non-touching cells add nothing).
    acting = force[agents]
    table = xp.zeros((1 + len(bodies.colliding_bodies), *acting.shape), xp.float64)
    table[0] = acting
    rows, cols = bodies.pair_cells
    table[cols + 1, rows] = pair_force
    rows, cols = bodies.mirror_cells
    table[cols + 1, rows] = -pair_force[bodies.mirror_pairs]
    force[agents] = table.sum(axis=0)


def integrate(bodies: Bodies, frame: Frame, force: Array) -> None:
    """One Euler step of every agent (mpe2's ``integrate_state``), in place."""
    xp = frame.xp
    frame.agent_pos += frame.agent_vel * DT
    vel = frame.agent_vel * (1 - DAMPING)
    vel += force * DT
    if bodies.capped:
        speed = xp.sqrt(xp.square(vel[:, 0]) + xp.square(vel[:, 1]))
        cap = bodies.agent_max_speed[:, None]
        over = speed > cap
        scaled = vel / xp.where(over, speed, 1.0)[:, None] * cap[:, None]
        vel = xp.where(over[:, None], scaled, vel)
    frame.agent_vel = vel


def step_world(bodies: Bodies, frame: Frame, actions: Array, continuous: bool) -> None:
    """Advance every copy by one step under ``actions``, in place (``bodies`` in the frame's
    library: ``on(bodies, frame.xp)``)."""
    force = action_force(bodies, actions, continuous, frame.xp)
    contact_forces(bodies, frame, force)
    integrate(bodies, frame, force)
    frame.steps += 1


def distances(a: Array, b: Array) -> Array:
    """(I, J, E) Euclidean distances between points ``a`` (I, 2, E) and ``b`` (J, 2, E), computed
    as mpe2 does (``sqrt(sum(square(a - b)))``)."""
    xp = ops_of(a)
    dx = a[:, None, 0] - b[None, :, 0]
    dy = a[:, None, 1] - b[None, :, 1]
    return xp.sqrt(xp.square(dx) + xp.square(dy))
