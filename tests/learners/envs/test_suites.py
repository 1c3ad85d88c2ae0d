"""The environment suites: the generic PettingZoo adapter pads agents of different spaces, masks
agents that leave early, refuses non-finite values, and steps the same in worker processes; every
built-in suite lists what it builds; and every new suite trains with each algorithm that applies
(slow: a few hundred steps each), its checkpoint's policy loading in the other backends."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners.admission.envs import trains_on
from learners.admission.parse import parse_spec
from learners.envs.catalogue import suite, suites
from learners.envs.parallel import ParallelVecEnv
from learners.envs.subproc import SubprocVecEnv
from learners.hooks import MemoryHooks
from learners.policy import load_policy
from learners.registry import entries
from learners.training import train

warnings.filterwarnings("ignore", category=DeprecationWarning)


def _build(suite_name: str, env_id: str, num_envs: int = 2, seed: int = 0, **kwargs: Any) -> Any:
    return suite(suite_name).factory(env_id, kwargs, seed, False)(num_envs, first_copy=0)


def test_speaker_and_listener_are_padded_and_their_extra_actions_unavailable() -> None:
    env = _build("mpe", "simple_speaker_listener_v4")
    info = env.info
    assert info.groups == ("speaker", "listener") and info.teams == ("agent", "agent")
    assert info.obs_dims == (3, 11) and info.obs_dim == 11
    assert info.action_dims == (3, 5) and info.action_dim == 5
    obs = env.reset()
    assert obs.avail_actions[:, 0].tolist() == [[1, 1, 1, 0, 0]] * 2
    assert obs.avail_actions[:, 1].tolist() == [[1, 1, 1, 1, 1]] * 2
    assert (obs.obs[:, 0, 3:] == 0).all() and (obs.obs_mask[:, 0, 3:] == 0).all()
    # An action past the speaker's own is never taken, whatever a learner gives.
    _, transition = env.step(np.array([[4, 2], [0, 4]]))
    assert np.isfinite(transition.rewards).all()
    env.close()


def test_the_world_comm_leader_has_a_body_of_its_own() -> None:
    env = _build("mpe", "simple_world_comm_v3", continuous_actions=True)
    assert env.info.groups[0] == "leadadversary" and env.info.teams[0] == "adversary"
    assert env.info.action_dims[0] > env.info.action_dims[1]
    assert env.info.action_kind == "continuous"
    obs = env.reset()
    _, transition = env.step(np.zeros((2, env.info.num_agents, env.info.action_dim)))
    assert obs.obs.shape == (2, 6, env.info.obs_dim) and transition.rewards.shape == (2, 6)
    env.close()


def test_a_plugin_agent_that_leaves_early_is_masked_until_the_episode_ends() -> None:
    env = _build("gridcoop", "signal_v0", num_envs=1)
    assert env.info.groups == ("scout", "carrier", "carrier")
    obs = env.reset(seed=4)
    assert obs.agent_mask.tolist() == [[1, 1, 1]]
    masks, ended = [], []
    for _ in range(env.info.max_episode_steps):
        obs, transition = env.step(np.ones((1, 3), np.int64))
        masks.append(obs.agent_mask.copy())
        ended.append(bool(transition.truncated[0]))
    # The scout spoke on the first step and left; the carriers stayed to the time limit, and the
    # next episode starts with all three again.
    assert [m.tolist() for m in masks[:-1]] == [[[0, 1, 1]]] * (len(masks) - 1)
    assert env.info.max_episode_steps == 10
    assert masks[-1].tolist() == [[1, 1, 1]] and ended == [False] * (len(ended) - 1) + [True]
    env.close()


def test_the_same_seed_plays_the_same_episodes_in_process_and_in_worker_processes() -> None:
    factory = suite("gridcoop").factory("signal_v0", {}, 11, False)
    local = factory(4, first_copy=0)
    spread = SubprocVecEnv(factory, 4, 2)
    rng = np.random.default_rng(0)
    try:
        a, b = local.reset(), spread.reset()
        for _ in range(25):
            np.testing.assert_array_equal(a.obs, b.obs)
            np.testing.assert_array_equal(a.agent_mask, b.agent_mask)
            np.testing.assert_array_equal(a.avail_actions, b.avail_actions)
            actions = rng.integers(0, 3, size=(4, 3))
            (a, ta), (b, tb) = local.step(actions), spread.step(actions)
            np.testing.assert_array_equal(ta.rewards, tb.rewards)
            np.testing.assert_array_equal(ta.final_obs, tb.final_obs)
    finally:
        local.close()
        spread.close()


class _Broken:
    """A parallel env whose second step observes NaN (or, ``raise_in_step``, raises)."""

    possible_agents = ["agent_0", "agent_1"]

    def __init__(self, raise_in_step: bool = False) -> None:
        from gymnasium import spaces

        self.agents: list[str] = []
        self._space, self._act = spaces.Box(-1, 1, (2,)), spaces.Discrete(2)
        self._raise, self._t = raise_in_step, 0

    def observation_space(self, agent: str) -> Any:
        return self._space

    def action_space(self, agent: str) -> Any:
        return self._act

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.agents, self._t = list(self.possible_agents), 0
        return {a: np.zeros(2, np.float32) for a in self.agents}, {}

    def step(self, actions: Any) -> Any:
        self._t += 1
        if self._t == 2 and self._raise:
            raise RuntimeError("the simulator lost its licence")
        value = np.nan if self._t == 2 else 0.0
        obs = {a: np.full(2, value, np.float32) for a in self.agents}
        flags = {a: False for a in self.agents}
        return obs, {a: 0.0 for a in self.agents}, flags, flags, {}

    def close(self) -> None:
        pass


def _broken(raise_in_step: bool, render: bool) -> _Broken:
    return _Broken(raise_in_step)


def test_a_non_finite_observation_names_the_env_copy_and_step() -> None:
    env = ParallelVecEnv(functools.partial(_broken, False), 1, 0, name="broken_v0")
    env.reset()
    env.step(np.zeros((1, 2), np.int64))
    with pytest.raises(ValueError, match=r"broken_v0 returned a non-finite observation .* step 2"):
        env.step(np.zeros((1, 2), np.int64))


def test_an_env_that_raises_in_step_raises_its_own_message() -> None:
    env = ParallelVecEnv(functools.partial(_broken, True), 1, 0, name="broken_v0")
    env.reset()
    env.step(np.zeros((1, 2), np.int64))
    with pytest.raises(RuntimeError, match="lost its licence"):
        env.step(np.zeros((1, 2), np.int64))


@pytest.mark.parametrize(
    ("suite_name", "env_id"),
    [(s.name, i) for s in suites() if s.name not in ("gymnasium",) for i in s.ids()],
)
def test_every_listing_says_what_the_built_env_has(suite_name: str, env_id: str) -> None:
    """The listing (read without building: what the API validates with) against a built copy:
    agents, teams, groups and action kind."""
    listed = suite(suite_name).entry(env_id)
    env = _build(suite_name, env_id, num_envs=1)
    try:
        info = env.info
        assert len(listed.teams) == info.num_agents
        assert listed.teams == info.teams
        assert listed.groups == (info.groups or info.teams)
        kinds = {k.value for k in listed.action_kinds}
        assert info.action_kind in kinds
        shape = suite(suite_name).sizes(env_id, {})
        assert (shape.num_agents, shape.obs_dim, shape.action_dim) == (
            info.num_agents,
            info.obs_dim,
            info.action_dim,
        )
    finally:
        env.close()


# -- training on every new suite ---------------------------------------------------------------

NEW_ENVS = [
    ("mpe", "simple_speaker_listener_v4"),
    ("mpe", "simple_world_comm_v3"),
    ("sisl", "pursuit_v4"),
    ("sisl", "multiwalker_v9"),
    ("mamujoco", "HalfCheetah-2x3"),
    ("lbf", "Foraging-8x8-2p-2f-coop-v3"),
    ("rware", "rware-tiny-2ag-v2"),
    ("gridcoop", "signal_v0"),
]
SMALL = {"hidden_sizes": [16, 16], "batch_size": 16, "learning_starts": 50, "rollout_length": 32}


def _spec(algorithm: str, backend: str, suite_name: str, env_id: str) -> Any:
    fields = next(e for e in entries() if e.algorithm == algorithm).config.model_fields
    kwargs: dict[str, Any] = {}
    if suite_name == "sisl" and env_id == "pursuit_v4":
        kwargs = {"max_cycles": 50}
    return parse_spec(
        {
            "name": "suite",
            "algorithm": algorithm,
            "backend": backend,
            "env": {"suite": suite_name, "id": env_id, "num_envs": 2, "kwargs": kwargs},
            "total_steps": 128,
            "seed": 5,
            "device": "cpu",
            "hyperparameters": {k: v for k, v in SMALL.items() if k in fields},
            "evaluation": {"every_steps": 128, "episodes": 1},
            "checkpoint": {"every_steps": 128, "keep_last": 1},
        }
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algorithm", "suite_name", "env_id"),
    [
        (str(e.algorithm), s, i)
        for s, i in NEW_ENVS
        for e in entries()
        if e.multi_agent and trains_on(e, s, i)
    ],
)
def test_each_new_suite_trains_with_each_algorithm_that_applies(
    algorithm: str, suite_name: str, env_id: str, tmp_path: Path
) -> None:
    hooks = MemoryHooks(checkpoint_dir=tmp_path)
    train(_spec(algorithm, "torch", suite_name, env_id), hooks)
    returns = hooks.series("eval/episode_return")
    assert returns and all(np.isfinite(v) for _, v in returns)
    ((_, path),) = hooks.checkpoints[-1:]
    assert path is not None and path.exists()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tensorflow", "mindspore"])
@pytest.mark.parametrize("algorithm", ["maddpg", "mappo", "ippo"])
@pytest.mark.parametrize("env_id", ["simple_speaker_listener_v4", "simple_world_comm_v3"])
def test_heterogeneous_scenarios_train_in_every_backend_and_load_in_the_others(
    backend: str, algorithm: str, env_id: str, tmp_path: Path
) -> None:
    hooks = MemoryHooks(checkpoint_dir=tmp_path)
    train(_spec(algorithm, backend, "mpe", env_id), hooks)
    (_, path) = hooks.checkpoints[-1]
    assert path is not None
    env = _build("mpe", env_id, num_envs=1, seed=1)
    obs = env.reset()
    actions = {}
    for other in ("torch", "tensorflow", "mindspore"):
        actions[other] = np.asarray(load_policy(path, other).act(obs))
    env.close()
    # The checkpoint records the groups, and every backend's policy acts alike on them.
    for other, acted in actions.items():
        np.testing.assert_allclose(acted, actions[backend], atol=1e-4, err_msg=other)


def test_a_broken_plugin_is_left_out_with_its_reason_and_the_rest_still_load(
    tmp_path: Path,
) -> None:
    """A real distribution on the path whose entry point names a module that is not there, and
    another that names a built-in suite's name: both are left out, with the reason, in a fresh
    interpreter (entry points are read once per process)."""
    import subprocess
    import sys

    for name, target in (("broken-plugin", "no_such_module:SUITE"), ("taken-name", "taken:SUITE")):
        info = tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        entry = name.replace("-", "_")
        (info / "entry_points.txt").write_text(f"[marlforge.environments]\n{entry} = {target}\n")
    (tmp_path / "taken.py").write_text(
        "from learners.envs.suites.sisl import SISL as SUITE\n"  # named "sisl": already taken
    )
    script = (
        "from learners.envs.suites.installed import plugin_errors, suite_names\n"
        "errors = plugin_errors()\n"
        "print(sorted(errors.items()))\n"
        "print(suite_names())\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    errors_line, names_line = result.stdout.strip().splitlines()[-2:]
    assert "('broken_plugin', \"ModuleNotFoundError: No module named 'no_such_module'\")" in (
        errors_line
    )
    assert "('taken_name', \"the suite name 'sisl' is already taken\")" in errors_line
    assert "'mpe'" in names_line and "'sisl'" in names_line


class _Masked:
    """A parallel env whose agents' legal actions change every step, given as PettingZoo gives
    them: in a dict observation (agent_0) or in the agent's info (agent_1)."""

    possible_agents = ["agent_0", "agent_1"]

    def __init__(self) -> None:
        from gymnasium import spaces

        self.agents: list[str] = []
        self._obs = spaces.Dict(
            {"observation": spaces.Box(0, 1, (2,)), "action_mask": spaces.MultiBinary(3)}
        )
        self._act, self._t = spaces.Discrete(3), 0

    def observation_space(self, agent: str) -> Any:
        return self._obs if agent == "agent_0" else self._obs["observation"]

    def action_space(self, agent: str) -> Any:
        return self._act

    def _mask(self) -> np.ndarray:
        mask = np.zeros(3, np.int8)
        mask[self._t % 3] = 1
        return mask

    def _observe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        value = np.full(2, 0.5, np.float32)
        obs = {"agent_0": {"observation": value, "action_mask": self._mask()}, "agent_1": value}
        return obs, {"agent_1": {"action_mask": self._mask()}}

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.agents, self._t = list(self.possible_agents), 0
        return self._observe()

    def step(self, actions: Any) -> Any:
        self._t += 1
        obs, infos = self._observe()
        flags = {a: False for a in self.agents}
        return obs, {a: 0.0 for a in self.agents}, flags, flags, infos

    def close(self) -> None:
        pass


def _masked(render: bool) -> _Masked:
    return _Masked()


def test_action_masks_from_observations_or_infos_narrow_the_available_actions() -> None:
    env = ParallelVecEnv(_masked, 1, 0, name="masked_v0", max_episode_steps=10)
    obs = env.reset()
    seen = [obs.avail_actions.copy()]
    for _ in range(3):
        obs, _ = env.step(np.zeros((1, 2), np.int64))
        seen.append(obs.avail_actions.copy())
    for t, avail in enumerate(seen):
        expected = np.eye(3, dtype=np.float32)[t % 3]
        np.testing.assert_array_equal(avail[0, 0], expected)
        np.testing.assert_array_equal(avail[0, 1], expected)
    # The mask moved with the step: the env, not a fixed padding, decided it.
    assert not np.array_equal(seen[1], seen[2])


@pytest.mark.parametrize(("x_size", "y_size"), [(2, 2), (3, 3), (4, 9), (5, 5), (16, 16)])
def test_pursuit_takes_only_as_many_agents_as_its_placement_always_finds_room_for(
    x_size: int, y_size: int
) -> None:
    """Pursuit's placement tries random cells until one is free of its kind and their neighbours:
    with too many agents it never returns, and the API builds an env to size a spec. The most the
    admission lets through builds on every seed tried; one more is refused by name."""
    from learners.admission.budget import env_kwarg_errors
    from learners.spec import EnvSpec

    sisl = suite("sisl")
    base = {"x_size": x_size, "y_size": y_size, "n_pursuers": 1, "n_evaders": 1, "max_cycles": 5}
    conflicts = sisl.kwarg_conflicts("pursuit_v4", {**base, "n_evaders": 10_000})
    most = int(conflicts[0][1].split()[2])
    assert [kind for kind, _ in conflicts] == ["n_evaders"]
    for n in sorted({1, most}):
        kwargs = {**base, "n_pursuers": n, "n_evaders": n}
        assert sisl.kwarg_conflicts("pursuit_v4", kwargs) == []
        for seed in range(20):
            env = sisl.factory("pursuit_v4", kwargs, seed, False)(1, first_copy=0)
            env.reset()
            env.close()
    refused = EnvSpec.model_validate(
        {"suite": "sisl", "id": "pursuit_v4", "kwargs": {**base, "n_evaders": most + 1}}
    )
    (error,) = env_kwarg_errors(refused)
    assert error.field == "env.kwargs.n_evaders"
    assert error.reason.startswith(f"at most {most} evaders fit a {x_size}x{y_size} grid")
