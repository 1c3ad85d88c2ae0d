"""The PyTorch WQMIX learner: OW/CW updates, targets, monotonic mixing, exploration, save/load,
and reference defects ``ids-from-config-batch-size`` (agent ids from the batch) and
``wqmix-weighting-and-central-loss`` (unknown weighting refused; docs/reference-defects.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from learners.algorithms.wqmix import WQMIXConfig, WQMIXStats, epsilon_at
from learners.buffers.replay import ReplayBatch, ReplayBuffer
from learners.envs.factory import make_vec_env
from learners.runners.off_policy import random_actions
from learners.spec import EnvSpec

torch = pytest.importorskip("torch")
from learners.backends.torch.wqmix import QMixer, TorchWQMIX  # noqa: E402

SMALL = {"hidden_sizes": (32,), "mixing_embed_dim": 8, "hypernet_hidden": 16,
         "central_mixer_hidden": 32, "batch_size": 16}  # fmt: skip


def make(**overrides: Any) -> tuple[Any, TorchWQMIX]:
    env = make_vec_env(EnvSpec(suite="mpe", id="simple_spread_v3", num_envs=2), 0)
    return env, TorchWQMIX(WQMIXConfig(**{**SMALL, **overrides}), env.info, "cpu", 0)


def replay(env: Any, steps: int = 60) -> ReplayBuffer:
    buffer = ReplayBuffer(env.info, 1000, with_state=True)
    rng = np.random.default_rng(0)
    obs = env.reset()
    for _ in range(steps):
        actions = random_actions(env.info, obs, rng)
        next_obs, transition = env.step(actions)
        buffer.add(obs, actions, transition)
        obs = next_obs
    return buffer


def sample(env: Any, size: int = 16) -> ReplayBatch:
    return replay(env).sample(size, np.random.default_rng(1))


def test_defect7_unknown_weighting_is_a_validation_error() -> None:
    with pytest.raises(ValidationError) as caught:
        WQMIXConfig(weighting="uniform")
    assert caught.value.errors()[0]["loc"] == ("weighting",)
    assert {WQMIXConfig(weighting="ow").weighting, WQMIXConfig(weighting="cw").weighting} == {
        "ow",
        "cw",
    }


@pytest.mark.parametrize("weighting", ["ow", "cw"])
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "separate"])
def test_update_gives_finite_stats_and_moves_weights(weighting: str, shared: bool) -> None:
    env, learner = make(weighting=weighting, share_parameters=shared, alpha=0.25)
    batch = sample(env)
    before = learner.state()
    stats = learner.update(batch)
    assert isinstance(stats, WQMIXStats)
    assert all(np.isfinite(v) for v in stats.as_dict().values())
    assert 0.25 <= stats.weight_mean <= 1.0
    after = learner.state()
    for name in ("agent.layers.0.weight", "mixer.hyper_w1.layers.0.weight",
                 "central_agent.head.weight", "central_mixer.net.layers.0.weight"):  # fmt: skip
        assert not np.array_equal(before[name], after[name]), name
    # Targets move only at a sync.
    np.testing.assert_array_equal(
        before["target_central_mixer.net.layers.0.weight"],
        after["target_central_mixer.net.layers.0.weight"],
    )
    env.close()


def test_defect6_any_batch_size_works() -> None:
    env, learner = make(batch_size=64)
    for size in (1, 5, 64, 100):
        assert np.isfinite(learner.update(sample(env, size)).loss)
    env.close()


def test_targets_come_from_target_central_networks_at_live_greedy_actions() -> None:
    env, learner = make()
    batch = sample(env)
    t = {k: learner._tensor(v) for k, v in vars(batch).items()}
    t["avail"], t["next_avail"] = t["avail_actions"], t["next_avail_actions"]
    greedy = torch.argmax(learner._utilities("agent", t["obs"], t["avail"]), -1)
    target, _ = learner._targets(t, greedy)
    # The live central networks play no part in the target...
    with torch.no_grad():
        for p in learner.nets["central_mixer"].parameters():
            p.add_(1.0)
    np.testing.assert_array_equal(learner._targets(t, greedy)[0].numpy(), target.numpy())
    # ...the target central networks do, and so does the live agent through its greedy actions.
    with torch.no_grad():
        for p in learner.nets["target_central_mixer"].parameters():
            p.add_(0.5)
    assert not np.allclose(learner._targets(t, greedy)[0].numpy(), target.numpy())
    env.close()


def test_target_sync_every_interval() -> None:
    env, learner = make(target_update_interval=3)
    batch = sample(env)
    for _ in range(3):
        learner.update(batch)
    state = learner.state()
    for name, value in state.items():
        if name.startswith("target_"):
            np.testing.assert_array_equal(value, state[name.removeprefix("target_")], err_msg=name)
    env.close()


def test_qmix_mixer_is_monotonic_in_every_utility() -> None:
    torch.manual_seed(0)
    mixer = QMixer(num_agents=3, state_dim=7, embed=8, hyper_hidden=16)
    q = torch.randn(256, 3, requires_grad=True)
    mixer(q, torch.randn(256, 7)).sum().backward()
    assert (q.grad >= 0).all()


def test_acting_respects_available_actions_and_epsilon() -> None:
    env, learner = make(epsilon_start=1.0, epsilon_end=0.0, epsilon_decay_steps=1000)
    obs = env.reset()
    obs.avail_actions[...] = 0.0
    obs.avail_actions[..., 3] = 1.0  # only action 3 is available
    for explore in (False, True):
        assert (learner.act(obs, explore=explore) == 3).all()
    assert epsilon_at(learner.config, 500) == pytest.approx(0.5)
    assert learner.explore_steps == env.info.num_envs
    env.close()


def test_state_round_trip_gives_the_same_next_update() -> None:
    env, learner = make(weighting="cw")
    batch = sample(env)
    learner.update(batch)
    _, twin = make(weighting="cw")
    twin.load_state(learner.state())
    assert twin.update(batch) == learner.update(batch)
    for name, value in twin.state().items():
        np.testing.assert_array_equal(value, learner.state()[name], err_msg=name)
    env.close()
