"""``VectorMPE``: E copies of one MPE scenario stepped as arrays, equal to mpe2 step for step.

The engine speaks mpe2's own action spaces (``Discrete(5)``, or ``Box(0, 1, (5,))`` clipped as
mpe2's wrapper clips), and returns what mpe2's parallel API returns after each step, as arrays:
observations (padded to the widest agent), each agent's reward, and per-copy termination and
truncation (an episode ends for every agent at once). It does not reset ended copies by itself:
``reset(mask)`` starts new episodes where the caller says, so the caller still sees each ended
episode's last observation. ``get_state``/``set_state`` expose the whole world, so tests can start
it from an mpe2 env's state. tests/learners/envs/test_vector_mpe.py holds it equal to mpe2.

``device`` places the world: ``None`` keeps it in NumPy arrays on the host; a torch device
(``"cpu"``, ``"cuda"``) keeps it in torch tensors there, and then ``step`` and ``observe`` take and
return tensors on that device, so a learner on a GPU reads observations without a copy to the host.
The reset draws are made on the host, from the same generators in the same order, so both start the
same worlds (tests/learners/envs/test_vector_torch.py holds the torch engine equal to NumPy's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from numpy.typing import NDArray

from learners.envs.vector.arrays import Array, ops_for
from learners.envs.vector.competitive import SimpleAdversary, SimplePush, SimpleTag
from learners.envs.vector.scenarios import Scenario, SimpleSpread
from learners.envs.vector.world import MOVE_ACTIONS, Frame, WorldState, step_world

SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "simple_spread_v3": SimpleSpread,
    "simple_adversary_v3": SimpleAdversary,
    "simple_push_v3": SimplePush,
    "simple_tag_v3": SimpleTag,
}
# Constructor arguments of mpe2 that change nothing the engine computes (drawing, info dicts).
IGNORED_KWARGS = frozenset({"dynamic_rescaling", "benchmark_data", "render_mode"})


def build_scenario(env_id: str, kwargs: dict[str, Any]) -> tuple[Scenario, int, bool]:
    """The scenario ``env_id`` with mpe2 constructor ``kwargs``, its ``max_cycles`` and whether
    its actions are continuous. Ids and kwargs the engine does not model raise ``ValueError``."""
    if env_id not in SCENARIOS:
        raise ValueError(f"the vector engine has no {env_id!r} (it has: {', '.join(SCENARIOS)})")
    rest = {k: v for k, v in kwargs.items() if k not in IGNORED_KWARGS}
    max_cycles = int(rest.pop("max_cycles", 25))
    continuous = bool(rest.pop("continuous_actions", False))
    try:
        scenario = SCENARIOS[env_id](**rest)
    except TypeError as error:
        raise ValueError(f"{env_id}: {error}") from None
    return scenario, max_cycles, continuous


class VectorMPE:
    """``num_envs`` copies of ``env_id`` (an mpe2 module name) built with mpe2's ``kwargs``, in
    NumPy arrays (``device=None``) or torch tensors on ``device``."""

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any],
        num_envs: int,
        seed: int,
        device: str | None = None,
    ) -> None:
        scenario, self.max_cycles, self.continuous = build_scenario(env_id, kwargs)
        self.xp = xp = ops_for(device)
        self.scenario = scenario.on(xp)
        self.num_envs = num_envs
        self.agent_ids = self.scenario.agent_ids
        self.num_agents = len(self.agent_ids)
        self.obs_dims = self.scenario.obs_dims
        self.obs_dim = max(self.obs_dims)
        self.state_dim = sum(self.obs_dims)
        self.action_dim = MOVE_ACTIONS
        self._rng = np.random.default_rng(seed)
        bodies = scenario.bodies
        self._frame = Frame.zeros(bodies.num_agents, bodies.num_landmarks, num_envs, xp)
        # Observations are computed env-last in float64, as mpe2 computes them, then cast once.
        self._obs64 = xp.zeros((self.num_agents, self.obs_dim, num_envs), xp.float64)
        self._obs = xp.zeros((num_envs, self.num_agents, self.obs_dim), xp.float32)
        # state() gathers each agent's real features out of the padded observations.
        self._state_index = xp.asarray(
            np.concatenate(
                [j * self.obs_dim + np.arange(dim) for j, dim in enumerate(self.obs_dims)]
            )
        )

    def reset(self, mask: Array | None = None, seeds: Sequence[int] | None = None) -> Array:
        """Start new episodes in the copies ``mask`` selects (all by default); returns every copy's
        observation (E, A, obs_dim). Draws as mpe2's ``reset_world`` does: the goal landmark, then
        agents uniform in [-1, 1]^2, landmarks in the scenario's range, all at rest.

        Without ``seeds`` the draws come from the engine's one generator. With ``seeds`` (one per
        selected copy, in copy order) each copy draws from gymnasium's ``np_random(seed)``, the
        generator mpe2's ``reset(seed=seed)`` makes, in mpe2's order: the copy starts exactly as
        an mpe2 env reset with that seed does (a Python loop over the copies being reset)."""
        xp = self.xp
        index = np.arange(self.num_envs) if mask is None else xp.flatnonzero(mask)
        if seeds is None:
            self._draw(index, self._rng)
        else:
            if len(seeds) != len(index):
                raise ValueError(f"{len(index)} copies to reset but {len(seeds)} seeds")
            for copy, seed in zip(index, seeds, strict=True):
                self._draw(np.array([copy]), seeding.np_random(int(seed))[0])
        frame, selected = self._frame, xp.asarray(index)
        frame.agent_vel[:, :, selected] = 0.0
        frame.steps[selected] = 0
        return self.observe()

    def _draw(self, index: NDArray[np.int64], rng: np.random.Generator) -> None:
        """Draw the initial world of copies ``index`` from ``rng``, in mpe2's order: the goal, then
        every agent's position (x, y per agent), then every landmark's."""
        count, frame, bodies, xp = len(index), self._frame, self.scenario.bodies, self.xp
        selected = xp.asarray(index)
        if self.scenario.draws_goal:
            frame.goal[selected] = xp.asarray(rng.integers(bodies.num_landmarks, size=count))
        # (count, bodies, 2) is the order the draws come in; the frame keeps copies last.
        agents = rng.uniform(-1, 1, (count, bodies.num_agents, 2))
        frame.agent_pos[:, :, selected] = xp.asarray(agents.transpose(1, 2, 0))
        limit = self.scenario.landmark_range
        landmarks = rng.uniform(-limit, limit, (count, bodies.num_landmarks, 2))
        frame.landmark_pos[:, :, selected] = xp.asarray(landmarks.transpose(1, 2, 0))

    def step(self, actions: Array) -> tuple[Array, Array, Array, Array]:
        """Act in every copy: ``actions`` (E, A) integers in [0, 5) or (E, A, 5) in [0, 1].

        Returns observations (E, A, obs_dim), rewards (E, A), terminated (E,), truncated (E,).
        A copy past its end keeps stepping until ``reset`` restarts it; the flags say when it ended.
        The observation array is the engine's own and is overwritten by the next call.
        """
        frame = self._frame
        step_world(self.scenario.bodies, frame, actions, self.continuous)
        rewards = self.xp.contiguous(self.scenario.rewards(frame).T)
        truncated = frame.steps >= self.max_cycles
        terminated = self.scenario.is_terminal(frame) & ~truncated
        return self.observe(), rewards, terminated, truncated

    def observe(self) -> Array:
        """(E, A, obs_dim) every agent's observation of the current state."""
        self.scenario.observe(self._frame, self._obs64)
        self.xp.copy_into(self._obs, self.xp.permute(self._obs64, (2, 0, 1)))
        return self._obs

    def state(self) -> Array:
        """(E, state_dim) mpe2's ``state()``: every agent's observation, concatenated."""
        flat = self._obs.reshape(self.num_envs, -1)
        return flat[:, self._state_index]

    def get_state(self) -> WorldState:
        """A copy of the whole world state."""
        return self._frame.state()

    def set_state(self, state: WorldState) -> Array:
        """Replace the world state with a copy of ``state``; returns the observations of it."""
        expected = self._frame.state()
        for name in ("agent_pos", "agent_vel", "landmark_pos", "goal", "steps"):
            if getattr(state, name).shape != getattr(expected, name).shape:
                raise ValueError(f"{name} must have shape {getattr(expected, name).shape}")
        self._frame = Frame.of(state, self.xp)
        return self.observe()
