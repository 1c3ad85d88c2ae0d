"""MADDPG's actor gradient is the paper's in every backend, on simple_tag (three adversaries
against one agent): agent i's actor moves only through its own critic Q_i and only through its own
action; a team's shared actor gets the sum of its members' own terms; networks are shared within
a team and never across teams. (The actor loss before this used every agent's live action in every
agent's Q, so an actor was pushed up its opponents' critics: each test here fails on that.)

Gradients are read back from Adam's first moment after one update (``applied_gradients``), with
clipping off so that nothing couples one agent's gradient to another's through a global norm.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch
from parity_assert import ONE_UPDATE, applied_gradients, assert_close

from learners.algorithms.ddpg import actor_loss
from learners.algorithms.maddpg import MADDPGConfig
from learners.buffers.replay import ReplayBatch, ReplayBuffer
from learners.enums import Algorithm, Backend
from learners.envs.base import EnvInfo
from learners.envs.mpe import MPEVecEnv
from learners.registry import built_pairs, entry
from learners.runners.off_policy import random_actions

# One worker for the module under ``--dist loadgroup``: the cases share each backend's learners
# (``_learner`` builds each once per process), and MindSpore's compile costs more than the tests.
pytestmark = pytest.mark.xdist_group("maddpg-gradient")

BACKENDS = [b for a, b in built_pairs() if a == Algorithm.MADDPG]
ADVERSARIES, AGENT = (0, 1, 2), 3  # simple_tag_v3's agents: adversary_0..2, agent_0
Tensors = Mapping[str, Any]


def _config(share: bool) -> MADDPGConfig:
    return MADDPGConfig(
        hidden_sizes=(16, 16), batch_size=16, tau=0.05, gamma=0.9, max_grad_norm=None,
        share_parameters=share,
    )  # fmt: skip


@functools.cache
def _tag(continuous: bool) -> tuple[EnvInfo, ReplayBatch]:
    """simple_tag's shapes and a batch of its real transitions, with about a quarter of the agent
    mask zero."""
    env = MPEVecEnv("simple_tag_v3", {"continuous_actions": continuous}, 2, seed=0)
    buffer = ReplayBuffer(env.info, 200)
    rng = np.random.default_rng(0)
    obs = env.reset()
    for _ in range(30):
        actions = random_actions(env.info, obs, rng)
        next_obs, transition = env.step(actions)
        buffer.add(obs, actions, transition)
        obs = next_obs
    env.close()
    batch = buffer.sample(16, np.random.default_rng(1))
    batch.agent_mask[:] = (rng.uniform(size=batch.agent_mask.shape) > 0.25).astype(np.float32)
    return env.info, batch


_BUILT: dict[tuple[Backend, bool, bool], tuple[Any, dict[str, Any]]] = {}


def _learner(backend: Backend, share: bool, continuous: bool = True) -> tuple[Any, dict[str, Any]]:
    """``backend``'s MADDPG on simple_tag and its initial state (built once: compiling costs more
    than the updates)."""
    key = (backend, share, continuous)
    if key not in _BUILT:
        info, _ = _tag(continuous)
        learner = entry(Algorithm.MADDPG).learner_class(backend)(_config(share), info, "cpu", 0)
        _BUILT[key] = (learner, learner.state())
    return _BUILT[key]


def _update(learner: Any, start: Tensors, batch: ReplayBatch) -> dict[str, Any]:
    """The state after one update from ``start``."""
    learner.load_state(start)
    learner.update(batch)
    return learner.state()


def _grads(state: Tensors, prefix: str) -> dict[str, np.ndarray]:
    """The applied gradients of the parameters under ``prefix`` (e.g. ``actor.agents.0.``)."""
    head = f"optim/{prefix.split('.')[0]}/{prefix}"
    return {k: v for k, v in applied_gradients(state).items() if k.startswith(head)}


def _perturbed(state: Tensors, prefix: str, seed: int = 7) -> dict[str, Any]:
    """``state`` with noise added to every live tensor under ``prefix``."""
    rng = np.random.default_rng(seed)
    return {
        k: (v + rng.normal(0.0, 0.3, v.shape).astype(v.dtype)) if k.startswith(prefix) else v
        for k, v in state.items()
    }


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    assert a.keys() == b.keys() and a
    return all(np.allclose(a[k], b[k], rtol=1e-6, atol=1e-9) for k in a)


# The critic changed, the actor read, and one actor that must move (so the test can fail).
CASES = {
    # separate networks: agent 0's critic changed; agent 3's actor (another team) and agent 1's
    # (a team-mate) keep their gradients, agent 0's changes
    "separate-opponent": (False, "critic.agents.0.", "actor.agents.3.", "actor.agents.0."),
    "separate-teammate": (False, "critic.agents.0.", "actor.agents.1.", "actor.agents.0."),
    # per-team networks: the adversaries' critic changed; the agent's actor keeps its gradient
    "teams": (True, "critic.teams.0.", "actor.teams.1.", "actor.teams.0."),
}


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("case", CASES)
def test_another_agents_critic_does_not_move_an_actors_gradient(
    backend: Backend, case: str
) -> None:
    share, critic, unmoved, moved = CASES[case]
    info, batch = _tag(True)
    learner, start = _learner(backend, share)
    before = _update(learner, start, batch)
    after = _update(learner, _perturbed(start, critic), batch)
    assert _same(_grads(after, unmoved), _grads(before, unmoved)), f"{unmoved} moved"
    assert not _same(_grads(after, moved), _grads(before, moved)), f"{moved} did not move"


def _own_terms(start: Tensors, after: Tensors, batch: ReplayBatch) -> list[dict[str, np.ndarray]]:
    """Each adversary's own term of the gradient reaching the adversaries' shared actor, by hand
    in PyTorch: d/d theta of -sum_b mask_bi Q_i(x_b, stored actions with a_i = mu(o_i)) / sum mask,
    with the actor before the update and the critic after its step (what the actor's step
    reads). Also the old loss's gradient (every agent's action live in every Q) as the last
    entry, which must differ."""
    learner, _ = _learner(Backend.TORCH, True)
    learner.load_state({**after, **{k: v for k, v in start.items() if k.startswith("actor.")}})
    params = list(learner.actor.teams[0].parameters())
    names = [f"optim/actor/actor.teams.0.{n}" for n, _ in learner.actor.teams[0].named_parameters()]
    obs, mask = torch.as_tensor(batch.obs), torch.as_tensor(batch.agent_mask)
    stored = learner._batch_actions(batch)
    policy = learner._policy(obs, torch.as_tensor(batch.avail_actions))
    terms = []
    for i in ADVERSARIES:
        joint = stored.clone()
        joint[:, i] = policy[:, i]
        loss = -(learner._q(obs, joint)[:, i] * mask[:, i]).sum() / mask.sum()
        grads = torch.autograd.grad(loss, params, retain_graph=True)
        terms.append({n: g.numpy().astype(np.float64) for n, g in zip(names, grads, strict=True)})
    old = actor_loss(learner.ops, learner._q(obs, policy), mask)
    grads = torch.autograd.grad(old, params)
    terms.append({n: g.numpy().astype(np.float64) for n, g in zip(names, grads, strict=True)})
    return terms


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_a_shared_actor_gets_the_sum_of_its_members_own_terms(backend: Backend) -> None:
    info, batch = _tag(True)
    reference, start = _learner(Backend.TORCH, True)
    *terms, old = _own_terms(start, _update(reference, start, batch), batch)
    want = {name: sum(term[name] for term in terms) for name in terms[0]}
    learner, _ = _learner(backend, True)
    got = _grads(_update(learner, start, batch), "actor.teams.0.")
    assert got.keys() == want.keys()
    for name in want:
        assert_close(got[name], want[name], ONE_UPDATE, name)
    assert not _same(old, want), "the old loss's gradient is the same: the test cannot tell"


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_networks_are_shared_within_a_team_not_across(backend: Backend) -> None:
    """Per-team networks with ids within the team; an update on the adversaries' rows alone
    (the agent's mask zero) leaves the agent's actor untouched, to the bit."""
    info, batch = _tag(True)
    learner, start = _learner(backend, True)
    hidden = 16
    assert "actor.layers.0.weight" not in start
    assert start["actor.teams.0.layers.0.weight"].shape == (hidden, info.obs_dim + 3)
    assert start["actor.teams.1.layers.0.weight"].shape == (hidden, info.obs_dim + 1)
    critic_in = info.num_agents * (info.obs_dim + info.action_dim)
    assert start["critic.teams.0.layers.0.weight"].shape == (hidden, critic_in + 3)
    adversaries_only = ReplayBatch(**vars(batch))
    adversaries_only.agent_mask = batch.agent_mask.copy()
    adversaries_only.agent_mask[:, AGENT] = 0.0
    after = _update(learner, start, adversaries_only)
    assert all(np.all(g == 0.0) for g in _grads(after, "actor.teams.1.").values())
    for name in (k for k in start if k.startswith("actor.teams.1.")):
        np.testing.assert_array_equal(after[name], start[name], err_msg=name)
    first = "actor.teams.0.layers.0.weight"
    assert not np.allclose(after[first], start[first])


def test_one_team_keeps_the_layout_of_old_checkpoints() -> None:
    """A cooperative scenario still has one shared actor and critic under the names it always had
    (``actor.layers...``, ids over every agent), so its old checkpoints load."""
    env = MPEVecEnv("simple_spread_v3", {"continuous_actions": True}, 1, seed=0)
    env.close()
    for backend in BACKENDS:
        cls = entry(Algorithm.MADDPG).learner_class(backend)
        state = cls(_config(True), env.info, "cpu", 0).state()
        assert not any(".teams." in k or ".agents." in k for k in state)
        assert state["actor.layers.0.weight"].shape == (16, env.info.obs_dim + 3)
