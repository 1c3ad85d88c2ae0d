"""Rollouts whose observations stay on the learner's device: the vector engine on a torch device
behind ``VecEnv`` (``VectorVecEnv(device=...)``), the rollout buffer that keeps the observations
there, and the rule that picks them for a run (``learners.training.observation_device``).

The device path changes where the observations live, never what they are: from the same seed and
actions the device env gives what the host env gives, and a MAPPO/IPPO rollout and update on it
give the same buffer, statistics and parameters. CI runs it on torch's CPU device; on a GPU host
the same tests run on ``cuda`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners import training
from learners.buffers.rollout import RolloutBuffer
from learners.checkpoint import read
from learners.enums import Algorithm, Backend, EnvSuite
from learners.envs.base import observation_ops
from learners.envs.factory import make_vec_env
from learners.envs.vector.adapter import VectorVecEnv
from learners.envs.vector.arrays import NUMPY
from learners.hooks import MemoryHooks
from learners.registry import entry
from learners.runners.on_policy import collect_rollout
from learners.spec import EnvSpec, ExperimentSpec

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# Where an observation is kept, not how it is computed, differs: the same numbers on both sides.
OBSERVED = ("obs", "state", "final_obs", "final_state", "last_obs", "last_state")
ENVS = [
    ("simple_spread_v3", {"max_cycles": 7}),
    ("simple_adversary_v3", {"max_cycles": 6}),  # padded observations, two teams
]


def host(value: Any) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else value.detach().cpu().numpy()


def on_device(value: Any, device: str) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == torch.device(device).type


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize(("env_id", "kwargs"), ENVS, ids=[e for e, _ in ENVS])
def test_device_env_gives_what_the_host_env_gives(
    env_id: str, kwargs: dict[str, Any], continuous: bool, device: str
) -> None:
    kwargs = {**kwargs, "continuous_actions": continuous}
    reference = VectorVecEnv(env_id, kwargs, 3, seed=11)
    env = VectorVecEnv(env_id, kwargs, 3, seed=11, device=device)
    assert observation_ops(reference) is NUMPY and observation_ops(env) is not NUMPY
    rng = np.random.default_rng(5)

    obs, ref_obs = (
        env.reset(episode_index=np.array([0, 4, 9])),
        reference.reset(episode_index=np.array([0, 4, 9])),
    )
    assert on_device(obs.obs, device) and on_device(obs.state, device)
    np.testing.assert_array_equal(host(obs.obs), ref_obs.obs)
    ends = 0
    for _ in range(3 * reference.info.max_episode_steps + 2):
        if continuous:
            actions = rng.uniform(-1.2, 1.2, (3, reference.info.num_agents, 5)).astype(np.float32)
        else:
            actions = rng.integers(0, 5, (3, reference.info.num_agents))
        obs, step = env.step(actions)
        ref_obs, ref_step = reference.step(actions)
        for name in ("obs", "state"):
            assert on_device(getattr(obs, name), device), name
            np.testing.assert_array_equal(host(getattr(obs, name)), getattr(ref_obs, name))
        for name in ("final_obs", "final_state"):
            assert on_device(getattr(step, name), device), name
            np.testing.assert_array_equal(host(getattr(step, name)), getattr(ref_step, name))
        # Rewards, flags and the episode figures are the host's: the runners count on them there.
        for name in ("rewards", "terminated", "truncated", "episode_returns", "agent_returns",
                     "episode_lengths"):  # fmt: skip
            value = getattr(step, name)
            assert isinstance(value, np.ndarray), name
            np.testing.assert_array_equal(value, getattr(ref_step, name), err_msg=name)
        ends += int(step.truncated.sum() + step.terminated.sum())
    assert ends >= 6, "several episodes ended and restarted"
    np.testing.assert_array_equal(env.episode_index, reference.episode_index)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("algorithm", [Algorithm.MAPPO, Algorithm.IPPO])
def test_rollouts_and_updates_on_the_device_equal_the_host(
    algorithm: Algorithm, continuous: bool, device: str
) -> None:
    """Three rollouts and updates of 15 steps on 7-step episodes (so episodes end mid-rollout and
    the final observations matter), from the host env and from the device env, with a learner
    on ``device`` both times."""
    algo = entry(algorithm)
    config = algo.config.resolve(
        EnvSuite.MPE, "simple_spread_v3", {"rollout_length": 15, "hidden_sizes": [32, 32]}
    )
    kwargs = {"max_cycles": 7, "continuous_actions": continuous}
    runs = []
    for env_device in (None, device):
        env = VectorVecEnv("simple_spread_v3", kwargs, 4, seed=2, device=env_device)
        learner = algo.learner_class(Backend.TORCH)(config, env.info, device, 0)
        buffer = RolloutBuffer(env.info, config.rollout_length, None, observation_ops(env))
        obs, memory = env.reset(), learner.initial_memory(4)
        stats = []
        for _ in range(3):
            buffer.reset()
            obs, memory = collect_rollout(env, learner, buffer, obs, memory)
            stats.append(learner.update(buffer).as_dict())
        runs.append((buffer, stats, learner.state()))
    (host_buffer, host_stats, host_state), (buffer, stats, state) = runs

    for name in OBSERVED:
        kept = getattr(buffer, name)
        assert on_device(kept, device), f"{name} stayed on {device}"
        np.testing.assert_allclose(host(kept), getattr(host_buffer, name), rtol=0, atol=1e-6)
    for name in ("actions", "log_prob", "rewards", "values", "next_values", "episode_end"):
        np.testing.assert_allclose(
            getattr(buffer, name), getattr(host_buffer, name), rtol=0, atol=1e-5, err_msg=name
        )
    assert host_buffer.episode_end.any(), "episodes ended inside the rollouts"
    for ours, theirs in zip(stats, host_stats, strict=True):
        assert ours.keys() == theirs.keys()
        np.testing.assert_allclose(list(ours.values()), list(theirs.values()), rtol=1e-5, atol=1e-6)
    assert state.keys() == host_state.keys()
    for name, value in host_state.items():
        np.testing.assert_allclose(state[name], value, rtol=0, atol=1e-5, err_msg=name)


def test_a_recurrent_rollout_is_not_kept_on_a_device() -> None:
    env = VectorVecEnv("simple_spread_v3", {}, 2, seed=0, device="cpu")
    with pytest.raises(ValueError, match="recurrent"):
        RolloutBuffer(env.info, 5, 16, observation_ops(env))


def test_only_the_vector_engine_keeps_observations_on_a_device() -> None:
    spec = EnvSpec(suite=EnvSuite.MPE, id="simple_spread_v3", num_envs=2, engine="mpe2")
    with pytest.raises(ValueError, match="vector engine"):
        make_vec_env(spec, seed=0, device="cpu")
    env = make_vec_env(spec.model_copy(update={"engine": "vector"}), seed=0, device="cpu")
    assert on_device(env.reset().obs, "cpu")


@pytest.mark.parametrize(
    ("algorithm", "backend", "device", "changes", "expected"),
    [
        (Algorithm.MAPPO, Backend.TORCH, "cuda", {}, "cuda"),
        (Algorithm.IPPO, Backend.TORCH, "cuda:1", {}, "cuda:1"),
        (Algorithm.MAPPO, Backend.TORCH, "cuda", {"num_envs": 256}, None),
        (Algorithm.MAPPO, Backend.TORCH, "cpu", {}, None),
        (Algorithm.MAPPO, Backend.TENSORFLOW, "cuda", {}, None),
        (Algorithm.MAPPO, Backend.TORCH, "cuda", {"engine": "mpe2"}, None),
        (Algorithm.MAPPO, Backend.TORCH, "cuda", {"recurrent": True}, None),
        (Algorithm.WQMIX, Backend.TORCH, "cuda", {}, None),
    ],
)
def test_which_runs_keep_observations_on_the_device(
    make_spec: Callable[..., ExperimentSpec],
    algorithm: Algorithm,
    backend: Backend,
    device: str,
    changes: dict[str, Any],
    expected: str | None,
) -> None:
    env = {
        "suite": "mpe",
        "id": "simple_spread_v3",
        "num_envs": changes.get("num_envs", training.DEVICE_ENV_MIN_COPIES),
    }
    if "engine" in changes:
        env["engine"] = changes["engine"]
    hyperparameters = {"recurrent": True} if changes.get("recurrent") else {}
    spec = make_spec(algorithm, backend, env=env, hyperparameters=hyperparameters)
    assert training.observation_device(spec, device) == expected


def test_a_run_trains_the_same_with_its_observations_on_a_device(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole loop (the runner's buffers, a shorter last rollout, evaluation, checkpoints) on
    a device env: here torch's CPU device, which ``observation_device`` picks only for a GPU, so
    the test picks it; the run ends where the host run does, with the same parameters."""
    env = {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 3, "kwargs": {"max_cycles": 9}}
    spec = make_spec(
        Algorithm.MAPPO,
        total_steps=410,
        env=env,
        hyperparameters={"hidden_sizes": [32, 32], "rollout_length": 30},
    )
    real_make = training.make_vec_env

    def run(chosen: str | None) -> tuple[dict[str, Any], list[tuple[int, float]]]:
        made: list[Any] = []

        def recording(*args: Any, **kwargs: Any) -> Any:
            made.append(real_make(*args, **kwargs))
            return made[-1]

        monkeypatch.setattr(training, "observation_device", lambda spec, device: chosen)
        monkeypatch.setattr(training, "make_vec_env", recording)
        (directory := tmp_path / str(chosen)).mkdir()
        hooks = MemoryHooks(checkpoint_dir=directory)
        training.train(spec, hooks)
        assert (observation_ops(made[0]) is NUMPY) == (chosen is None)
        said = [text for _, text in hooks.logs if text.startswith("training mappo")]
        assert said and said[0].endswith("the env stepping on cpu") == (chosen == "cpu"), said
        assert observation_ops(made[1]) is NUMPY, "evaluation steps on the host"
        step, path = hooks.checkpoints[-1]
        assert step >= spec.total_steps and path is not None
        return read(path)[0], hooks.series("eval/episode_return")

    finals = [run(None), run("cpu")]
    (host_tensors, host_evals), (tensors, evals) = finals
    assert evals == host_evals
    for name, value in host_tensors.items():
        np.testing.assert_allclose(tensors[name], value, rtol=0, atol=1e-5, err_msg=name)
