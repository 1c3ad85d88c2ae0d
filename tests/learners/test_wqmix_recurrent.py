"""Recurrent WQMIX (GRU agents on whole episodes) in PyTorch: the config, padding that never
reaches the loss, truncation's bootstrap, acting with a carried hidden state, checkpoint names,
loading the policy, and training runs. The update's numbers are held to the NumPy oracle by the
parity suite (``tests/learners/parity``, variants ``*-gru-*``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from learners.admission.parse import parse_spec
from learners.algorithms.ddpg import DDPGConfig
from learners.algorithms.wqmix import WQMIXConfig, episode_inputs
from learners.buffers.episodes import EpisodeBatch
from learners.checkpoint import read
from learners.envs.factory import make_vec_env
from learners.hooks import MemoryHooks
from learners.policy import load_policy
from learners.runners.off_policy import trains_on_episodes
from learners.spec import EnvSpec, ExperimentSpec, SpecError
from learners.training import train

torch = pytest.importorskip("torch")
from learners.backends.torch.wqmix import TorchWQMIX  # noqa: E402

SMALL = {"hidden_sizes": (16, 16), "rnn_hidden_size": 8, "mixing_embed_dim": 8,
         "hypernet_hidden": 16, "central_mixer_hidden": 16, "recurrent": True}  # fmt: skip
LIMIT = 6
LENGTHS = np.array([LIMIT, 2, 4, 1, LIMIT])
TERMINATED = np.array([0, 1, 0, 1, 0])  # the others are truncated


def env_spec(num_envs: int = 2) -> EnvSpec:
    return EnvSpec(
        suite="mpe", id="simple_spread_v3", num_envs=num_envs, kwargs={"max_cycles": LIMIT}
    )


def make(**overrides: Any) -> TorchWQMIX:
    env = make_vec_env(env_spec(), 0)
    env.close()
    return TorchWQMIX(WQMIXConfig(**{**SMALL, **overrides}), env.info, "cpu", 0)


def episodes(learner: TorchWQMIX, seed: int = 0) -> EpisodeBatch:
    """Episodes of ``LENGTHS``, zeros in the padding, as the buffer stores them."""
    info, rng = learner.info, np.random.default_rng(seed)
    b, n = len(LENGTHS), info.num_agents
    filled = (np.arange(LIMIT) < LENGTHS[:, None]).astype(np.float32)
    observed = np.arange(LIMIT + 1) <= LENGTHS[:, None]  # the steps and the final observation
    terminated = np.zeros((b, LIMIT), np.float32)
    terminated[np.arange(b), LENGTHS - 1] = TERMINATED
    return EpisodeBatch(
        obs=(rng.normal(size=(b, LIMIT + 1, n, info.obs_dim)) * observed[..., None, None]).astype(
            np.float32
        ),
        state=(rng.normal(size=(b, LIMIT + 1, info.state_dim)) * observed[..., None]).astype(
            np.float32
        ),
        avail_actions=np.ones((b, LIMIT + 1, n, info.action_dim), np.float32),
        actions=rng.integers(0, info.action_dim, (b, LIMIT, n))
        * filled[..., None].astype(np.int64),
        rewards=(rng.normal(size=(b, LIMIT, n)) * filled[..., None]).astype(np.float32),
        agent_mask=np.repeat(filled[..., None], n, -1),
        terminated=terminated,
        filled=filled,
    )


def with_garbage_padding(batch: EpisodeBatch, seed: int) -> EpisodeBatch:
    """``batch`` with large random values in every padded entry."""
    rng = np.random.default_rng(seed)
    noisy = copy.deepcopy(batch)
    for field in (
        "obs",
        "state",
        "avail_actions",
        "actions",
        "rewards",
        "agent_mask",
        "terminated",
    ):
        array = getattr(noisy, field)
        limit = LENGTHS + (1 if array.shape[1] == LIMIT + 1 else 0)
        padded = np.arange(array.shape[1]) >= limit[:, None]
        shape = array[padded].shape
        if field == "actions":
            array[padded] = rng.integers(0, array.max() + 1, shape)
        elif field in ("avail_actions", "agent_mask", "terminated"):
            array[padded] = rng.integers(0, 2, shape)
        else:
            array[padded] = 100.0 * rng.normal(size=shape)
    return noisy


def update_from(learner: TorchWQMIX, start: dict[str, Any], batch: EpisodeBatch) -> Any:
    learner.load_state(start)
    stats = learner.update(batch).as_dict()
    return stats, learner.state()


def assert_same(a: tuple[Any, Any], b: tuple[Any, Any]) -> None:
    (stats_a, state_a), (stats_b, state_b) = a, b
    assert stats_a == pytest.approx(stats_b, rel=1e-6, abs=1e-7)
    for name, value in state_a.items():
        np.testing.assert_allclose(state_b[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


# -- config ------------------------------------------------------------------------------------


def test_recurrent_config_fields_and_the_buffer_must_hold_a_batch() -> None:
    config = WQMIXConfig(recurrent=True)
    assert (config.episode_batch_size, config.episode_buffer_size, config.rnn_hidden_size) == (
        32, 5000, 64,
    )  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        WQMIXConfig(recurrent=True, episode_batch_size=64, episode_buffer_size=10)
    assert caught.value.errors()[0]["loc"] == ("episode_buffer_size",)
    # Feed-forward runs never read the episode fields.
    assert not WQMIXConfig(episode_batch_size=64, episode_buffer_size=10).recurrent


def test_an_unusable_recurrent_spec_is_refused_at_submission_by_field() -> None:
    spec = {"name": "r", "algorithm": "wqmix", "backend": "torch", "total_steps": 100,
            "env": {"suite": "mpe", "id": "simple_spread_v3"},
            "hyperparameters": {"recurrent": True, "episode_batch_size": 8,
                                "episode_buffer_size": 4, "rnn_hidden_size": 0}}  # fmt: skip
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert {e.field for e in caught.value.errors} == {
        "hyperparameters.episode_buffer_size",
        "hyperparameters.rnn_hidden_size",
    }


def test_the_runner_trains_on_episodes_only_when_asked_and_the_learner_can() -> None:
    learner = make()
    assert trains_on_episodes(WQMIXConfig(recurrent=True), learner)
    assert not trains_on_episodes(WQMIXConfig(), learner)
    assert not trains_on_episodes(DDPGConfig(), learner)
    with pytest.raises(ValueError, match="no recurrent variant"):
        trains_on_episodes(WQMIXConfig(recurrent=True), object())


# -- the update --------------------------------------------------------------------------------


@pytest.mark.parametrize("weighting", ["ow", "cw"])
def test_padding_never_reaches_the_loss_or_the_gradients(weighting: str) -> None:
    learner = make(weighting=weighting)
    start = learner.state()
    batch = episodes(learner)
    clean = update_from(learner, start, batch)
    assert all(np.isfinite(v) for v in clean[0].values())
    assert_same(update_from(learner, start, with_garbage_padding(batch, 1)), clean)
    # The same change on a real step does show: the test can see what it guards.
    changed = copy.deepcopy(batch)
    changed.rewards[2, 1] += 5.0
    assert update_from(learner, start, changed)[0]["loss"] != clean[0]["loss"]


def test_truncation_bootstraps_from_the_final_observation_and_termination_does_not() -> None:
    learner = make()
    start = learner.state()
    batch = episodes(learner)
    clean = update_from(learner, start, batch)
    for episode, terminated in enumerate(TERMINATED):
        final = copy.deepcopy(batch)
        final.obs[episode, LENGTHS[episode]] += 3.0
        final.state[episode, LENGTHS[episode]] += 3.0
        moved = update_from(learner, start, final)
        if terminated:
            assert_same(moved, clean)
        else:
            assert moved[0]["target_mean"] != clean[0]["target_mean"], episode


def test_targets_come_from_the_target_central_networks() -> None:
    learner = make()
    start = learner.state()
    batch = episodes(learner)
    target_mean = update_from(learner, start, batch)[0]["target_mean"]

    def shifted(prefixes: tuple[str, ...]) -> dict[str, Any]:
        return {k: v + 0.1 if k.startswith(prefixes) else v for k, v in start.items()}

    live = shifted(("central_agent.", "central_mixer."))
    assert update_from(learner, live, batch)[0]["target_mean"] == target_mean
    for prefix in ("target_central_agent.", "target_central_mixer."):
        moved = update_from(learner, shifted((prefix,)), batch)[0]["target_mean"]
        assert moved != pytest.approx(target_mean, rel=1e-4), prefix


def test_episode_inputs_are_time_first_with_the_team_reward_and_the_loss_mask() -> None:
    learner = make()
    batch = episodes(learner)
    batch.agent_mask[0, 0] = [1.0, 0.0, 0.0]
    inputs = episode_inputs(batch)
    assert inputs.obs.shape == (LIMIT + 1, len(LENGTHS), 3, learner.info.obs_dim)
    np.testing.assert_array_equal(inputs.actions[:, 1], batch.actions[1])
    assert inputs.team_reward[0, 0] == batch.rewards[0, 0, 0]  # the one live agent's reward
    np.testing.assert_array_equal(inputs.mask, batch.filled.T)


@pytest.mark.parametrize("size", [1, 40])
def test_any_number_of_episodes(size: int) -> None:
    learner = make(weighting="cw", share_parameters=False)
    batch = episodes(learner)
    rows = np.arange(size) % len(LENGTHS)
    sized = EpisodeBatch(**{k: np.take(v, rows, axis=0) for k, v in vars(batch).items()})
    assert all(np.isfinite(v) for v in learner.update(sized).as_dict().values())


# -- acting ------------------------------------------------------------------------------------


def test_acting_step_by_step_follows_the_unrolled_network_and_resets_at_episode_ends() -> None:
    learner = make(epsilon_start=0.0, epsilon_end=0.0)
    env = make_vec_env(env_spec(), 0)
    obs = env.reset()
    memory = learner.initial_memory(2)
    seen, taken = [], []
    for _ in range(4):
        seen.append(copy.deepcopy(obs))  # the env's arrays are reused two steps later
        actions, memory = learner.explore_step(obs, memory)
        taken.append(actions)
        obs, _ = env.step(actions)
    env.close()
    stacked = learner._tensor(np.stack([o.obs for o in seen]))
    with torch.no_grad():
        net = learner.nets["agent"]
        h0 = torch.zeros((2, 3, 8))
        q, last = net(stacked, h0)
        after, _ = net.recur(net.encode(stacked), h0)
    np.testing.assert_array_equal(np.stack(taken), torch.argmax(q, -1).numpy())
    torch.testing.assert_close(memory, last)
    # The state is what acting carries: a fresh state at step 3 acts on a different memory.
    assert not torch.allclose(after[2], torch.zeros_like(after[2]))
    # Copy 1's episode ends: only its memory goes back to zero.
    reset = learner.reset_memory(memory, np.array([False, True]))
    torch.testing.assert_close(reset[0], memory[0])
    assert not reset[1].any()
    # ``act`` keeps its own memory, the same sequence from zeros, and ``end_episodes`` clears it.
    greedy = [learner.act(o, explore=False) for o in seen]
    np.testing.assert_array_equal(np.stack(greedy), np.stack(taken))
    learner.end_episodes(np.array([True, True]))
    np.testing.assert_array_equal(learner.act(seen[0], explore=False), taken[0])


def test_checkpoint_names_are_canonical_and_the_policy_loads_alone() -> None:
    learner = make(share_parameters=False)
    learner.update(episodes(learner))
    state = learner.state()
    for net in ("agent", "central_agent", "target_central_agent"):
        for name in ("gru.input.weight", "gru.input.bias", "gru.hidden.weight", "gru.hidden.bias"):
            assert f"{net}.{name}" in state
    assert state["agent.gru.input.weight"].shape == (3, 3 * 8, 16)  # (N, 3H, first hidden)
    assert "optim/agent/agent.gru.hidden.weight/exp_avg" in state
    names = learner.policy_tensor_names()
    assert "agent.gru.hidden.weight" in names and all(n.startswith("agent.") for n in names)
    twin = make(share_parameters=False, learning_rate=0.1)
    twin.load_state({n: state[n] for n in names}, policy_only=True)
    for name in names:
        np.testing.assert_array_equal(twin.state()[name], state[name])


# -- training ----------------------------------------------------------------------------------


def recurrent_spec(make_spec: Callable[..., ExperimentSpec], **hyper: Any) -> ExperimentSpec:
    hyperparameters = {"hidden_sizes": [32, 32], "rnn_hidden_size": 16, "learning_starts": 100,
                       "recurrent": True, "episode_batch_size": 4, "episode_buffer_size": 10,
                       "updates_per_step": 0.25, **hyper}  # fmt: skip
    return make_spec("wqmix", "torch", hyperparameters=hyperparameters, total_steps=400)


@pytest.mark.parametrize("weighting", ["ow", "cw"])
def test_recurrent_training_runs_and_its_policy_replays(
    weighting: str, make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks
) -> None:
    spec = recurrent_spec(make_spec, weighting=weighting)
    train(spec, hooks)
    losses = hooks.series("learner/loss")
    assert losses and all(np.isfinite(v) for _, v in losses)
    assert all(np.isfinite(p.value) for p in hooks.points)
    _, path = hooks.checkpoints[-1]
    tensors, manifest = read(path)
    assert manifest.runner["updates"] > 0
    # 400 steps over 2 copies are 16 episodes of 25 steps; the buffer keeps the last 10.
    assert tensors["episodes/obs"].shape == (10, 26, 3, 18)
    assert tensors["episodes/filled"].sum() == 10 * 25 and int(tensors["episodes/position"]) == 6
    # The policy alone, loaded by ``load_policy``, acts as the whole learner does.
    policy = load_policy(path)
    learner = TorchWQMIX(spec.config(), policy.info, "cpu", spec.seed)
    learner.load_state(tensors)
    env = make_vec_env(spec.env, 9)
    obs = env.reset()
    for _ in range(4):
        actions = learner.act(obs, explore=False)
        np.testing.assert_array_equal(policy.act(obs), actions)
        obs, _ = env.step(actions)
    env.close()
