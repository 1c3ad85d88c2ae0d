"""The PyTorch MAPPO/IPPO learner: updates, recomputed log-probs, save/load, configs and the
reference defects that live above the shared math (docs/reference-defects.md):
``value-normaliser``, ``two-clipping-names`` and ``ids-from-config-batch-size`` (old numbers 4, 5,
6, as in the tests' names)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from learners.algorithms.ppo import (
    IPPOConfig,
    MAPPOConfig,
    PPOConfig,
    PPOStats,
    learning_rate_at,
    rollout_targets,
)
from learners.buffers.rollout import RolloutBuffer
from learners.envs.base import Observation
from learners.envs.factory import make_vec_env
from learners.functional.normalizer import ValueNormalizer
from learners.functional.returns import gae
from learners.runners.on_policy import collect_rollout
from learners.spec import EnvSpec

torch = pytest.importorskip("torch")
from learners.backends.torch.ppo import TorchPPO  # noqa: E402

CONFIGS: dict[str, type[PPOConfig]] = {"mappo": MAPPOConfig, "ippo": IPPOConfig}
SMALL = {"hidden_sizes": (32, 32), "rnn_hidden_size": 16, "rollout_length": 30, "chunk_length": 10}


def make(algo: str = "mappo", continuous: bool = False, num_envs: int = 2, **overrides: Any):
    kwargs = {"continuous_actions": True} if continuous else {}
    env = make_vec_env(
        EnvSpec(suite="mpe", id="simple_spread_v3", num_envs=num_envs, kwargs=kwargs), 0
    )
    config = CONFIGS[algo](**{**SMALL, **overrides})
    return env, TorchPPO(config, env.info, "cpu", 0)


def rollout(env: Any, learner: TorchPPO) -> RolloutBuffer:
    cfg = learner.config
    buffer = RolloutBuffer(
        env.info, cfg.rollout_length, cfg.rnn_hidden_size if cfg.recurrent else None
    )
    collect_rollout(env, learner, buffer, env.reset(), learner.initial_memory(env.info.num_envs))
    return buffer


VARIANTS = [
    pytest.param(
        a,
        c,
        r,
        s,
        id=f"{a}-{'cont' if c else 'disc'}-{'gru' if r else 'mlp'}-{'shared' if s else 'separate'}",
    )  # fmt: skip
    for a, c, r, s in itertools.product(
        ["mappo", "ippo"], [False, True], [False, True], [True, False]
    )
]


@pytest.mark.parametrize("algo,continuous,recurrent,shared", VARIANTS)
def test_update_gives_finite_stats_and_moves_weights(
    algo: str, continuous: bool, recurrent: bool, shared: bool
) -> None:
    env, learner = make(algo, continuous, recurrent=recurrent, share_parameters=shared,
                        epochs=2, minibatches=3)  # fmt: skip
    buffer = rollout(env, learner)
    before = learner.state()
    stats = learner.update(buffer)
    assert isinstance(stats, PPOStats)
    assert set(stats.as_dict()) == set(PPOStats.__dataclass_fields__)
    assert all(np.isfinite(v) for k, v in stats.as_dict().items() if k != "explained_variance")
    after = learner.state()
    for name in learner.policy_tensor_names():
        assert not np.array_equal(before[name], after[name]), name
    assert learner.updates == 1
    env.close()


@pytest.mark.parametrize("algo,continuous,recurrent,shared", VARIANTS)
def test_first_step_recomputes_the_rollout_log_probs(
    algo: str, continuous: bool, recurrent: bool, shared: bool
) -> None:
    """Before the first gradient step the policy is the rollout's: ratio 1 everywhere. A wrong GRU
    start state, a chunk crossing an episode, or misaligned padding breaks this."""
    env, learner = make(algo, continuous, recurrent=recurrent, share_parameters=shared,
                        epochs=1, minibatches=1)  # fmt: skip
    stats = learner.update(rollout(env, learner))
    assert stats.approx_kl < 1e-6
    assert stats.clip_fraction == 0.0
    env.close()


def test_critic_inputs_centralised_for_mappo_and_local_for_ippo() -> None:
    env, mappo = make("mappo")
    _, ippo = make("ippo")
    info = env.info
    assert mappo.critic.layers[0].weight.shape[1] == info.state_dim + info.num_agents
    assert ippo.critic.layers[0].weight.shape[1] == info.obs_dim + info.num_agents
    _, separate = make("mappo", share_parameters=False)
    assert separate.critic.layers[0].weight.shape == (info.num_agents, 32, info.state_dim)
    env.close()


def test_state_round_trip_resumes_the_same_updates() -> None:
    env, learner = make("mappo", recurrent=True, epochs=2, minibatches=2)
    learner.update(rollout(env, learner))
    buffer = rollout(env, learner)
    _, twin = make("mappo", recurrent=True, epochs=2, minibatches=2)
    twin.load_state(learner.state())
    for name, value in twin.state().items():
        np.testing.assert_array_equal(value, learner.state()[name], err_msg=name)
    first, second = learner.update(buffer), twin.update(buffer)
    assert first == second
    for name, value in twin.state().items():
        np.testing.assert_array_equal(value, learner.state()[name], err_msg=name)
    env.close()


def test_policy_only_load_acts_the_same() -> None:
    env, learner = make("ippo", continuous=True)
    learner.update(rollout(env, learner))
    obs = env.reset()
    _, other = make("ippo", continuous=True)
    other.load_state(
        {n: v for n, v in learner.state().items() if n in learner.policy_tensor_names()},
        policy_only=True,
    )
    np.testing.assert_allclose(other.act(obs, explore=False), learner.act(obs, explore=False))
    env.close()


def test_defect6_agent_ids_come_from_the_batch_not_the_config() -> None:
    env, learner = make("mappo", num_envs=2)
    obs = env.reset()
    wide = Observation(*(np.repeat(getattr(obs, f), 5, axis=0) for f in
                         ("obs", "obs_mask", "state", "agent_mask", "avail_actions")))  # fmt: skip
    actions = learner.act(wide, explore=True)
    assert actions.shape == (10, env.info.num_agents)
    step, _ = learner.rollout_step(wide, None)
    assert step.log_prob.shape == (10, env.info.num_agents)
    env.close()


def test_recurrent_act_memory_resets_per_episode() -> None:
    env, learner = make("mappo", recurrent=True)
    obs = env.reset()
    first = learner.act(obs, explore=False)
    for _ in range(5):
        learner.act(obs, explore=False)  # the GRU state moves on
    learner.end_episodes(np.ones(env.info.num_envs, bool))
    np.testing.assert_array_equal(learner.act(obs, explore=False), first)
    env.close()


def test_defect4_gae_on_denormalised_values_and_normalised_targets() -> None:
    env, learner = make("mappo", value_norm=True, advantage_norm=False)
    buffer = rollout(env, learner)
    normalizer = ValueNormalizer(mean=5.0, var=4.0, count=10.0)
    seen = normalizer.state()
    targets = rollout_targets(learner.config, buffer, normalizer)
    values = buffer.values * 2.0 + 5.0  # de-normalised with the statistics before the update
    next_values = buffer.next_values * 2.0 + 5.0
    adv, returns = gae(buffer.rewards, values, next_values, buffer.terminated[..., None],
                       buffer.episode_end[..., None], 0.99, 0.95)  # fmt: skip
    np.testing.assert_allclose(targets.advantages, adv, rtol=1e-5, atol=1e-5)
    # The statistics absorbed the returns; the target is the returns normalised with them.
    assert normalizer.count == seen[2] + buffer.agent_mask.sum()
    np.testing.assert_allclose(targets.returns, normalizer.normalize(returns), rtol=1e-5, atol=1e-5)
    # The reported targets are the returns in reward units, over live agents only.
    live = returns[buffer.agent_mask > 0]
    assert targets.target_mean == pytest.approx(float(live.mean()), rel=1e-5)
    assert targets.target_max == pytest.approx(float(live.max()), rel=1e-5)
    env.close()


def test_target_stats_leave_out_agents_that_are_not_alive() -> None:
    env, learner = make("ippo", value_norm=False, advantage_norm=False)
    buffer = rollout(env, learner)
    buffer.rewards[:, :, 0] = 1000.0  # agent 0's returns would be the largest by far ...
    buffer.agent_mask[:, :, 0] = 0.0  # ... but it was never alive
    targets = rollout_targets(learner.config, buffer, ValueNormalizer())
    assert targets.target_max < 1000.0
    assert targets.target_max == pytest.approx(float(targets.returns[:, :, 1:].max()), rel=1e-6)
    buffer.agent_mask[:] = 0.0
    empty = rollout_targets(learner.config, buffer, ValueNormalizer())
    assert np.isnan(empty.target_mean) and np.isnan(empty.target_max)
    env.close()


def test_defect5_one_name_for_gradient_clipping() -> None:
    fields = set(MAPPOConfig.model_fields)
    assert fields - set(IPPOConfig.model_fields) == {"agent_specific_state"}  # MAPPO's critic only
    assert set(IPPOConfig.model_fields) < fields
    assert "max_grad_norm" in fields
    assert not {"use_grad_clip", "grad_clip_norm", "use_grad_norm"} & fields
    assert MAPPOConfig(max_grad_norm=None).max_grad_norm is None
    with pytest.raises(ValidationError, match="grad_clip_norm"):
        IPPOConfig(grad_clip_norm=1.0)
    with pytest.raises(ValidationError, match="agent_specific_state"):
        IPPOConfig(agent_specific_state=True)  # IPPO's critic has no global state


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        MAPPOConfig(rollout_length=10, minibatches=11)
    assert caught.value.errors()[0]["loc"] == ("minibatches",)
    with pytest.raises(ValidationError) as caught:
        MAPPOConfig(recurrent=True, rollout_length=10, chunk_length=20)
    assert caught.value.errors()[0]["loc"] == ("chunk_length",)
    with pytest.raises(ValidationError):
        MAPPOConfig(clip_eps=0.0)


def test_linear_lr_decay() -> None:
    cfg = MAPPOConfig(learning_rate=1e-3, lr_end_factor=0.1)
    assert learning_rate_at(cfg, 0, 1000) == pytest.approx(1e-3)
    assert learning_rate_at(cfg, 500, 1000) == pytest.approx(0.55e-3)
    assert learning_rate_at(cfg, 2000, 1000) == pytest.approx(1e-4)
    assert learning_rate_at(MAPPOConfig(linear_lr_decay=False), 900, 1000) == pytest.approx(5e-4)
    env, learner = make("mappo", learning_rate=1e-3, lr_end_factor=0.1)
    assert learner.lr_decay(500, 1000) == pytest.approx(0.55e-3)
    assert all(
        group["lr"] == pytest.approx(0.55e-3)
        for optimizer in learner.optimizers.values()
        for group in optimizer.param_groups
    )
    env.close()


@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "gru"])
def test_value_pass_matches_step_by_step_valuation(recurrent: bool) -> None:
    """The critic's batched pass after the rollout gives the values it would have given step by
    step while acting: GRU states reset at episode ends, final observations valued after their
    step, the last observation after the rollout."""
    env, learner = make("mappo", recurrent=recurrent, rollout_length=30)
    buffer = rollout(env, learner)
    learner._value_pass(buffer)
    critic, info = learner.critic, env.info
    h = torch.zeros((info.num_envs, info.num_agents, 16)) if recurrent else None

    def value(obs: np.ndarray, state: np.ndarray, h: Any) -> tuple[np.ndarray, Any]:
        x = learner._critic_input(torch.as_tensor(obs), torch.as_tensor(state))
        with torch.no_grad():
            if h is None:
                return critic(x)[0][..., 0].numpy(), None
            out, h_next = critic(x.unsqueeze(0), h)
            return out[0, ..., 0].numpy(), h_next

    for t in range(buffer.length):
        if recurrent:
            np.testing.assert_allclose(buffer.critic_hidden[t], h.numpy(), atol=1e-5)
        v, h_next = value(buffer.obs[t], buffer.state[t], h)
        np.testing.assert_allclose(buffer.values[t], v, atol=1e-5)
        ended = buffer.episode_end[t]
        if ended.any():
            final, _ = value(buffer.final_obs[t], buffer.final_state[t], h_next)
            np.testing.assert_allclose(buffer.next_values[t][ended], final[ended], atol=1e-5)
            if h_next is not None:
                h_next = h_next * torch.as_tensor(~ended, dtype=torch.float32)[:, None, None]
        h = h_next
    last, _ = value(buffer.last_obs, buffer.last_state, h)
    keep = ~buffer.episode_end[-1]
    np.testing.assert_allclose(buffer.next_values[-1][keep], last[keep], atol=1e-5)
    assert buffer.episode_end[:, 0].any(), "the rollout crosses an episode end"
    env.close()


def test_shared_first_layer_is_a_linear_map_of_observation_and_one_hot_id() -> None:
    from learners.backends.torch.agent_nets import AgentMLP

    net = AgentMLP(5, (8,), 2, 3, shared=True, activation="relu", rnn_hidden_size=None)
    net.reset_parameters(torch.Generator().manual_seed(0), head_gain=1.0)
    x = torch.randn(4, 7, 3, 5)
    ids = torch.eye(3).expand(4, 7, 3, 3)
    explicit = torch.relu(net.layers[0](torch.cat([x, ids], dim=-1)))
    torch.testing.assert_close(net.encode(x), explicit)


def test_a_state_shared_by_the_agents_is_encoded_agent_major() -> None:
    """MAPPO's shared critic takes the state once, with a size-1 agent axis, and adds each agent's
    id columns by broadcasting: the sum must come out in the ordinary (agent-major) layout, not the
    transposed id view's, or every later layer and its backward run on strided memory (a tenth
    of MAPPO's update; docs/results/2026-11-28-mappo-memory-layout.md)."""
    from learners.backends.torch.agent_nets import AgentMLP

    net = AgentMLP(5, (8, 8), 2, 3, shared=True, activation="relu", rnn_hidden_size=None)
    net.reset_parameters(torch.Generator().manual_seed(0), head_gain=1.0)
    state = torch.randn(200, 1, 5)
    hidden = net.encode(state)
    assert hidden.shape == (200, 3, 8)
    assert hidden.is_contiguous()
    torch.testing.assert_close(hidden, net.encode(state.expand(200, 3, 5).contiguous()))
