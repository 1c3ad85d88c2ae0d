"""The NumPy oracle of the learners: their networks' forward passes read straight from a portable
checkpoint's tensors (PyTorch layout), and the losses of one update computed from them with the
shared math over ``NumpyOps`` in float64.

Backend-against-backend parity cannot notice a defect that every backend shares; this can. A
learner's reported stats must equal what the textbook update computes from the same weights and
batch, whichever backend it runs on.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.ddpg import DDPGConfig, actor_loss, critic_loss
from learners.algorithms.maddpg import MADDPGConfig
from learners.algorithms.ppo import PPOConfig, agent_specific_state, rollout_targets
from learners.algorithms.wqmix import WQMIXConfig
from learners.buffers.episodes import EpisodeBatch
from learners.buffers.replay import ReplayBatch
from learners.buffers.rollout import RolloutBuffer
from learners.enums import Algorithm
from learners.envs.base import EnvInfo
from learners.envs.teams import team_indices
from learners.functional import distributions as dist
from learners.functional.losses import entropy_bonus, policy_loss, ppo_loss, value_loss
from learners.functional.normalizer import ValueNormalizer
from learners.functional.numpy_ops import NumpyOps
from learners.functional.returns import td_target
from learners.functional.wqmix import is_greedy_joint_action, weights_for, wqmix_loss

Array = NDArray[Any]
Tensors = Mapping[str, Array]
N = NumpyOps()


def _f64(x: Array) -> Array:
    return np.asarray(x, dtype=np.float64)


def _layer_indices(tensors: Tensors, prefix: str) -> list[int]:
    head = f"{prefix}.layers."
    return sorted({int(k[len(head) :].split(".")[0]) for k in tensors if k.startswith(head)})


def mlp(tensors: Tensors, prefix: str, x: Array, *, tanh_output: bool) -> Array:
    """``learners.backends.*.networks.MLP``: Linear layers at even indices, ReLU between."""
    indices = _layer_indices(tensors, prefix)
    h = _f64(x)
    for n, i in enumerate(indices):
        h = h @ _f64(tensors[f"{prefix}.layers.{i}.weight"]).T + _f64(
            tensors[f"{prefix}.layers.{i}.bias"]
        )
        if n < len(indices) - 1:
            h = np.maximum(h, 0.0)
    return np.tanh(h) if tanh_output else h


def _agent_linear(tensors: Tensors, name: str, x: Array) -> Array:
    weight, bias = _f64(tensors[f"{name}.weight"]), _f64(tensors[f"{name}.bias"])
    if weight.ndim == 2:  # shared: (out, in)
        return x @ weight.T + bias
    return np.einsum("...ni,noi->...no", x, weight) + bias  # per agent: (N, out, in)


def _sigmoid(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


def agent_mlp(
    tensors: Tensors, prefix: str, x: Array, h: Array | None, *, activation: str
) -> Array:
    """``AgentMLP``: one-hot ids for shared weights, optional GRU after the first hidden layer.
    ``x`` is ``(..., N, in)`` (time first ``(L, B, N, in)`` with a hidden state ``h``)."""
    y = _encode(tensors, prefix, x, activation)
    if f"{prefix}.gru.input.weight" in tensors:
        assert h is not None
        y, _ = _gru_steps(tensors, prefix, y, _f64(h), np.zeros(y.shape[:2]))
    return _decode(tensors, prefix, y, activation)


# -- DDPG and MADDPG --------------------------------------------------------------------------


class DDPGNets:
    """DDPG's actor and critic on (B, N, ...) arrays (the agent axis is a batch axis)."""

    def __init__(self, config: DDPGConfig, info: EnvInfo) -> None:
        self.config, self.info = config, info

    def policy(
        self, tensors: Tensors, prefix: str, obs: Array, avail: Array, noise: Array | None
    ) -> Array:
        return mlp(tensors, prefix, obs, tanh_output=True)

    def q(self, tensors: Tensors, prefix: str, obs: Array, actions: Array) -> Array:
        return mlp(tensors, prefix, np.concatenate([_f64(obs), actions], -1), tanh_output=False)[
            ..., 0
        ]

    def batch_actions(self, batch: ReplayBatch) -> Array:
        return _f64(batch.actions)

    def actor_actions(self, policy: Array, stored: Array) -> Array:
        """What the critic sees in the actor's update: DDPG's Q(s, mu(s))."""
        return policy


class MADDPGNets(DDPGNets):
    """MADDPG's: ids for shared weights, per-agent networks otherwise, a joint critic input, and
    for discrete actions one-hot actions and the greedy (target) or Gumbel-max (live) policy."""

    config: MADDPGConfig

    def _net(self, tensors: Tensors, prefix: str, x: Array, tanh_output: bool) -> Array:
        n = self.info.num_agents
        teams = team_indices(self.info.sharing_sets(across_groups=self.config.share_across_groups))
        if self.config.share_parameters and len(teams) == 1:
            ids = np.broadcast_to(np.eye(n), (x.shape[0], n, n))
            return mlp(tensors, prefix, np.concatenate([x, ids], -1), tanh_output=tanh_output)
        rows = []
        for i in range(n):
            if not self.config.share_parameters:
                rows.append(mlp(tensors, f"{prefix}.agents.{i}", x[:, i], tanh_output=tanh_output))
                continue
            # Several teams (or groups): the set's network, with the agent's one-hot id in it.
            k = next(k for k, team in enumerate(teams) if i in team)
            size = len(teams[k])
            place = np.broadcast_to(np.eye(size)[teams[k].index(i)], (x.shape[0], size))
            given = np.concatenate([x[:, i], place], -1)
            rows.append(mlp(tensors, f"{prefix}.teams.{k}", given, tanh_output=tanh_output))
        return np.stack(rows, 1)

    def policy(
        self, tensors: Tensors, prefix: str, obs: Array, avail: Array, noise: Array | None
    ) -> Array:
        discrete = self.info.action_kind == "discrete"
        out = self._net(tensors, prefix, _f64(obs), tanh_output=not discrete)
        if not discrete:
            return out
        logits = np.where(avail > 0.5, out, -1e9)
        if noise is not None:  # the straight-through sample's forward value: a Gumbel-max one-hot
            logits = logits - np.log(-np.log(np.clip(noise, 1e-10, 1.0 - 1e-7)))
        return np.eye(self.info.action_dim)[np.argmax(logits, -1)]

    def q(self, tensors: Tensors, prefix: str, obs: Array, actions: Array) -> Array:
        """Each agent's Q of one joint action (B, N, A) or of its own (B, N, N, A)."""
        b, n = obs.shape[0], self.info.num_agents
        if not self.config.centralised_critic:  # Q_i(o_i, a_i): agent i's own slot of row i
            if actions.ndim == 4:
                actions = actions[:, np.arange(n), np.arange(n)]
            return self._net(tensors, prefix, np.concatenate([_f64(obs), actions], -1), False)[
                ..., 0
            ]
        if actions.ndim == 3:
            actions = np.broadcast_to(actions[:, None], (b, n, *actions.shape[1:]))
        joint_obs = np.broadcast_to(_f64(obs).reshape(b, 1, -1), (b, n, n * obs.shape[-1]))
        joint = np.concatenate([joint_obs, actions.reshape(b, n, -1)], -1)
        return self._net(tensors, prefix, joint, False)[..., 0]

    def actor_actions(self, policy: Array, stored: Array) -> Array:
        """The paper's: agent i's critic sees agent i's policy action and the stored actions of
        every other agent (row i of (B, N, N, A))."""
        own = np.eye(self.info.num_agents, dtype=bool)[None, :, :, None]
        return np.where(own, policy[:, None], stored[:, None])

    def batch_actions(self, batch: ReplayBatch) -> Array:
        if self.info.action_kind == "discrete":
            return np.eye(self.info.action_dim)[batch.actions]
        return _f64(batch.actions)


def actor_critic_stats(
    nets: DDPGNets, before: Tensors, after: Tensors, batch: ReplayBatch
) -> dict[str, float]:
    """The losses of one DDPG/MADDPG update: the critic's from the weights ``before`` it, the
    actor's from the actor before and the critic after the critic's step (the update's order).
    A discrete MADDPG actor's Gumbel draws are replayed from ``rng/gumbel`` before the update."""
    noise = None
    if "rng/gumbel" in before and nets.info.action_kind == "discrete":
        gumbel = np.random.Generator(np.random.PCG64())
        rng.restore(gumbel, np.asarray(before["rng/gumbel"]))
        noise = gumbel.random(size=(*batch.obs.shape[:2], nets.info.action_dim), dtype=np.float32)
    next_actions = nets.policy(
        before, "target_actor", batch.next_obs, batch.next_avail_actions, None
    )
    q_next = nets.q(before, "target_critic", batch.next_obs, next_actions)
    target = td_target(
        N, _f64(batch.rewards), q_next, _f64(batch.terminated)[:, None], nets.config.gamma
    )
    q_taken = nets.q(before, "critic", batch.obs, nets.batch_actions(batch))
    mask = _f64(batch.agent_mask)
    policy = nets.policy(before, "actor", batch.obs, batch.avail_actions, noise)
    policy_actions = nets.actor_actions(policy, nets.batch_actions(batch))
    q_policy = nets.q(after, "critic", batch.obs, policy_actions)
    return {
        "loss_critic": N.item(critic_loss(N, q_taken, target, mask)),
        "loss_actor": N.item(actor_loss(N, q_policy, mask)),
        "q_value": float(q_taken.mean()),
        "td_target": float(target.mean()),
    }


def critic_output_bias_gradient(nets: DDPGNets, before: Tensors, batch: ReplayBatch) -> float:
    """d loss_critic / d (the critic's output bias, shared) = masked mean of 2 (Q - y): what that
    bias's gradient must be when nothing flows into the target (reference defect
    ``target-with-gradient``)."""
    next_actions = nets.policy(
        before, "target_actor", batch.next_obs, batch.next_avail_actions, None
    )
    q_next = nets.q(before, "target_critic", batch.next_obs, next_actions)
    target = (
        _f64(batch.rewards) + nets.config.gamma * (1.0 - _f64(batch.terminated)[:, None]) * q_next
    )
    q_taken = nets.q(before, "critic", batch.obs, nets.batch_actions(batch))
    mask = _f64(batch.agent_mask)
    return float((2.0 * (q_taken - target) * mask).sum() / max(mask.sum(), 1.0))


# -- WQMIX --------------------------------------------------------------------------------------


def _elu(x: Array) -> Array:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def qmixer(tensors: Tensors, prefix: str, q: Array, state: Array) -> Array:
    """QMIX's monotonic mixer: w2 . elu(q |W1(s)| + b1(s)) + V(s), |.| on the hypernetworks."""
    b1 = mlp(tensors, f"{prefix}.hyper_b1", state, tanh_output=False)
    w1 = np.abs(mlp(tensors, f"{prefix}.hyper_w1", state, tanh_output=False))
    w1 = w1.reshape(*state.shape[:-1], q.shape[-1], b1.shape[-1])
    hidden = _elu((_f64(q)[..., None] * w1).sum(-2) + b1)
    w2 = np.abs(mlp(tensors, f"{prefix}.hyper_w2", state, tanh_output=False))
    return (hidden * w2).sum(-1) + mlp(tensors, f"{prefix}.value", state, tanh_output=False)[..., 0]


def central_mixer(tensors: Tensors, prefix: str, q: Array, state: Array) -> Array:
    """Q* = MLP([q, s]), plus V(s) where the mixer has a value head (the authors' central mixer)."""
    inputs = np.concatenate([_f64(q), _f64(state)], -1)
    q_star = mlp(tensors, f"{prefix}.net", inputs, tanh_output=False)[..., 0]
    if f"{prefix}.value.layers.0.weight" in tensors:
        q_star = q_star + mlp(tensors, f"{prefix}.value", state, tanh_output=False)[..., 0]
    return q_star


def _utilities(tensors: Tensors, prefix: str, obs: Array, avail: Array) -> Array:
    q = agent_mlp(tensors, prefix, obs, None, activation="relu")
    return np.where(_f64(avail) > 0.5, q, -1e9)


def wqmix_stats(
    config: WQMIXConfig, before: Tensors, batch: ReplayBatch, defect: str | None = None
) -> dict[str, float]:
    """The losses of one WQMIX update from the weights ``before`` it. ``defect="central_sum"``
    computes the central loss as the reference's MindSpore copy did (a sum over the agent-mask
    sum, reference defect ``wqmix-weighting-and-central-loss``) instead of the masked mean."""
    mask = _f64(batch.agent_mask)
    live = mask > 0.5
    q = _utilities(before, "agent", batch.obs, batch.avail_actions)
    greedy = np.argmax(q, -1)
    greedy_next = np.argmax(
        _utilities(before, "agent", batch.next_obs, batch.next_avail_actions), -1
    )
    q_next = N.gather_last(
        agent_mlp(before, "target_central_agent", batch.next_obs, None, activation="relu"),
        greedy_next,
    )
    q_star_next = central_mixer(
        before, "target_central_mixer", np.where(live, q_next, 0.0), batch.next_state
    )
    team_reward = (_f64(batch.rewards) * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)
    target = td_target(N, team_reward, q_star_next, _f64(batch.terminated), config.gamma)
    q_greedy = N.gather_last(
        agent_mlp(before, "target_central_agent", batch.obs, None, activation="relu"), greedy
    )
    q_star_greedy = central_mixer(
        before, "target_central_mixer", np.where(live, q_greedy, 0.0), batch.state
    )
    q_tot = qmixer(
        before, "mixer", np.where(live, N.gather_last(q, batch.actions), 0.0), batch.state
    )
    q_central = N.gather_last(
        agent_mlp(before, "central_agent", batch.obs, None, activation="relu"), batch.actions
    )
    q_star = central_mixer(before, "central_mixer", np.where(live, q_central, 0.0), batch.state)
    weights = weights_for(
        N, config.weighting, td_error=q_tot - target,
        is_greedy=is_greedy_joint_action(N, batch.actions, greedy, mask),
        target=target, q_central_greedy=q_star_greedy, alpha=config.alpha,
    )  # fmt: skip
    transitions = mask.max(-1)
    terms = wqmix_loss(N, q_tot, q_star, target, weights, transitions)
    stats = {name: N.item(value) for name, value in terms._asdict().items()}
    if defect == "central_sum":
        stats["loss_central"] = float(((q_star - target) ** 2 * transitions).sum() / mask.sum())
        stats["loss"] = stats["loss_qmix"] + stats["loss_central"]
    stats["q_tot_mean"], stats["target_mean"] = float(q_tot.mean()), float(target.mean())
    return stats


def _unrolled(tensors: Tensors, prefix: str, obs: Array, hidden_size: int) -> Array:
    """``AgentMLP`` with a GRU over time-first episodes ``obs`` (L, B, N, D) from zeros."""
    h = np.zeros((*obs.shape[1:3], hidden_size))
    return agent_mlp(tensors, prefix, obs, h, activation="relu")


def wqmix_episode_stats(
    config: WQMIXConfig, before: Tensors, batch: EpisodeBatch
) -> dict[str, float]:
    """The losses of one recurrent WQMIX update on whole episodes, written step by step: each
    network runs over an episode's T+1 observations from a zero state; step t's target is
    r_t + gamma (1 - terminated_t) Q*_target(s_{t+1}, greedy actions at t+1), and every mean is
    over the steps that are ``filled`` and have a live agent."""
    hidden = config.rnn_hidden_size
    obs = np.swapaxes(_f64(batch.obs), 0, 1)  # (T+1, B, N, D)
    states = np.swapaxes(_f64(batch.state), 0, 1)
    avail = np.swapaxes(_f64(batch.avail_actions), 0, 1)
    q = np.where(avail > 0.5, _unrolled(before, "agent", obs, hidden), -1e9)
    q_target = _unrolled(before, "target_central_agent", obs, hidden)
    q_central_all = _unrolled(before, "central_agent", obs, hidden)
    steps = batch.actions.shape[1]
    columns: dict[str, list[Array]] = {}
    for t in range(steps):
        actions = batch.actions[:, t]
        agent_mask = _f64(batch.agent_mask[:, t])
        live = agent_mask > 0.5
        greedy, greedy_next = np.argmax(q[t], -1), np.argmax(q[t + 1], -1)
        q_next = np.where(live, N.gather_last(q_target[t + 1], greedy_next), 0.0)
        q_star_next = central_mixer(before, "target_central_mixer", q_next, states[t + 1])
        team_reward = (_f64(batch.rewards[:, t]) * agent_mask).sum(-1) / np.maximum(
            agent_mask.sum(-1), 1.0
        )
        target = team_reward + config.gamma * (1.0 - _f64(batch.terminated[:, t])) * q_star_next
        q_greedy = np.where(live, N.gather_last(q_target[t], greedy), 0.0)
        q_star_greedy = central_mixer(before, "target_central_mixer", q_greedy, states[t])
        q_taken = np.where(live, N.gather_last(q[t], actions), 0.0)
        q_tot = qmixer(before, "mixer", q_taken, states[t])
        q_central = np.where(live, N.gather_last(q_central_all[t], actions), 0.0)
        q_star = central_mixer(before, "central_mixer", q_central, states[t])
        weights = weights_for(
            N, config.weighting, td_error=q_tot - target,
            is_greedy=is_greedy_joint_action(N, actions, greedy, agent_mask),
            target=target, q_central_greedy=q_star_greedy, alpha=config.alpha,
        )  # fmt: skip
        mask = _f64(batch.filled[:, t]) * agent_mask.max(-1)
        for name, value in (("q_tot", q_tot), ("q_star", q_star), ("target", target),
                            ("weights", weights), ("mask", mask)):  # fmt: skip
            columns.setdefault(name, []).append(value)
    c = {name: np.stack(values) for name, values in columns.items()}
    terms = wqmix_loss(N, c["q_tot"], c["q_star"], c["target"], c["weights"], c["mask"])
    stats = {name: N.item(value) for name, value in terms._asdict().items()}
    kept = c["mask"].sum()
    stats["q_tot_mean"] = float((c["q_tot"] * c["mask"]).sum() / kept)
    stats["target_mean"] = float((c["target"] * c["mask"]).sum() / kept)
    return stats


# -- PPO --------------------------------------------------------------------------------------


def _gru_steps(
    tensors: Tensors, prefix: str, y: Array, h: Array, starts: Array
) -> tuple[Array, Array]:
    """The GRU over a time-first sequence with the state zeroed where an episode starts: the
    states after and before every step."""
    gates = _agent_linear(tensors, f"{prefix}.gru.input", y)
    after, before = [], []
    for t in range(y.shape[0]):
        h = h * (1.0 - starts[t])[:, None, None]
        before.append(h)
        h = _gru_cell(tensors, prefix, gates[t], h)
        after.append(h)
    return np.stack(after), np.stack(before)


def _gru_cell(tensors: Tensors, prefix: str, x_gates: Array, h: Array) -> Array:
    x_r, x_z, x_n = np.split(x_gates, 3, axis=-1)
    h_r, h_z, h_n = np.split(_agent_linear(tensors, f"{prefix}.gru.hidden", h), 3, axis=-1)
    r, z = _sigmoid(x_r + h_r), _sigmoid(x_z + h_z)
    return (1.0 - z) * np.tanh(x_n + r * h_n) + z * h


def _encode(tensors: Tensors, prefix: str, x: Array, activation: str) -> Array:
    """``AgentMLP``'s first layer (ids appended for shared weights: the agent's id, or with a
    network per team the one-hot of its place in its team, ``per_agent_teams``)."""
    y = _f64(x)
    if _f64(tensors[f"{prefix}.layers.0.weight"]).ndim == 2:
        num_agents = y.shape[-2]
        y = np.concatenate(
            [y, np.broadcast_to(np.eye(num_agents), (*y.shape[:-1], num_agents))], -1
        )
    if f"{prefix}.places" in tensors:
        places = _f64(tensors[f"{prefix}.places"])
        y = np.concatenate([y, np.broadcast_to(places, (*y.shape[:-1], places.shape[-1]))], -1)
    return _activation(activation)(_agent_linear(tensors, f"{prefix}.layers.0", y))


def _decode(tensors: Tensors, prefix: str, y: Array, activation: str) -> Array:
    for i in _layer_indices(tensors, prefix)[1:]:
        y = _activation(activation)(_agent_linear(tensors, f"{prefix}.layers.{i}", y))
    return _agent_linear(tensors, f"{prefix}.head", y)


def _activation(name: str) -> Any:
    return np.tanh if name == "tanh" else (lambda v: np.maximum(v, 0.0))


def per_agent_teams(
    config: Any, info: EnvInfo, tensors: Tensors, nets: tuple[str, ...] = ("actor", "critic")
) -> Tensors:
    """Networks with a shared set of weights per sharing set (team, or group of a team:
    ``EnvInfo.sharing_sets``), ``(T, ...)`` tensors, written as per-agent ones, ``(N, ...)``:
    each agent gets its set's weights, and its first layer reads the one-hot of its place in the
    set (``<net>.places``, (N, width)), as the set's network tells its members apart. Other
    layouts are returned as they are."""
    sets = info.sharing_sets(across_groups=config.share_across_groups)
    names = list(dict.fromkeys(sets))
    if not config.share_parameters or len(names) == 1:
        return tensors
    team = np.array([names.index(t) for t in sets])
    place = [sets[:i].count(t) for i, t in enumerate(sets)]
    out = {k: (np.asarray(v)[team] if k.split(".")[0] in nets else v) for k, v in tensors.items()}
    for net in nets:
        out[f"{net}.places"] = np.eye(max(place) + 1)[place]
    return out


def _critic_input(config: PPOConfig, obs: Array, state: Array) -> Array:
    if not config.centralised_critic:
        return _f64(obs)
    state = _f64(state)[..., None, :]
    state = np.broadcast_to(state, (*obs.shape[:-1], state.shape[-1]))
    if agent_specific_state(config):
        return np.concatenate([state, _f64(obs)], -1)
    return state


def ppo_value_pass(config: PPOConfig, tensors: Tensors, buffer: RolloutBuffer) -> dict[str, Array]:
    """The critic's values of every observation of the rollout (each step's, each ended episode's
    final one, the one after the last step) from a fresh critic state, and (recurrent) the
    critic's state before each step."""
    act = config.activation
    x = _critic_input(config, buffer.obs, buffer.state)
    final_x = _critic_input(config, buffer.final_obs, buffer.final_state)
    last_x = _critic_input(config, buffer.last_obs, buffer.last_state)
    if not config.recurrent:
        values, final, last = (
            agent_mlp(tensors, "critic", v, None, activation=act) for v in (x, final_x, last_x)
        )
        return {"values": values[..., 0], "final": final[..., 0], "last": last[..., 0]}
    ended = buffer.episode_end.astype(np.float64)
    starts = np.concatenate([np.zeros_like(ended[:1]), ended[:-1]])
    h = np.zeros((*x.shape[1:-1], config.rnn_hidden_size))
    after, before = _gru_steps(tensors, "critic", _encode(tensors, "critic", x, act), h, starts)
    gate = lambda v: _agent_linear(tensors, "critic.gru.input", _encode(tensors, "critic", v, act))  # noqa: E731
    final = _gru_cell(tensors, "critic", gate(final_x), after)
    last = _gru_cell(tensors, "critic", gate(last_x), after[-1] * (1.0 - ended[-1])[:, None, None])
    return {
        "values": _decode(tensors, "critic", after, act)[..., 0],
        "final": _decode(tensors, "critic", final, act)[..., 0],
        "last": _decode(tensors, "critic", last, act)[..., 0],
        "critic_hidden": before,
    }


def _ppo_rows(config: PPOConfig, buffer: RolloutBuffer, data: dict[str, Array]) -> dict[str, Array]:
    """The rollout arranged as the learners train on it: (T*E, ...) rows, or time-first chunks
    whose padding is masked out."""
    if not config.recurrent:
        rows = buffer.length * buffer.info.num_envs
        return {k: v.reshape(rows, *v.shape[2:]) for k, v in data.items()}
    chunks = buffer.chunks(config.chunk_length)
    hidden = {k: chunks.first(data.pop(k)) for k in ("actor_hidden", "critic_hidden")}
    out = {k: np.swapaxes(chunks.gather(v), 0, 1) for k, v in data.items()}
    out["mask"] = out["mask"] * chunks.filled.T[..., None]
    return {**out, **hidden}


# Each with the reference defect it stands for (docs/reference-defects.md) and its old number.
DEFECTS = (
    "critic_on_old_values",  # critic-on-old-values (1): the critic regresses onto the old values
    "half_clip",  # mindspore-ppo-loss (2): the clip range silently halved
    "huber_ignored",  # mindspore-ppo-loss (2): the squared error whatever huber_delta says
    "masked_prediction",  # mindspore-ppo-loss (2): the agent mask on the prediction, not the loss
    "policy_loss_per_row",  # per-tensor-clipping (3): summed over agents, then averaged over rows
    "value_norm_unused",  # value-normaliser (4): the normaliser updated, the target unnormalised
    "prediction_normalised",  # value-normaliser (4): the prediction normalised a second time
)


def ppo_stats(
    config: PPOConfig, info: EnvInfo, before: Tensors, buffer: RolloutBuffer,
    defect: str | None = None,
) -> dict[str, float]:  # fmt: skip
    """The loss terms of a PPO update that takes one gradient step on the whole rollout (one epoch,
    one minibatch: a masked mean does not depend on the order of the rows), from the weights
    ``before`` it and an untouched copy of the rollout. ``defect`` computes them the way one of
    the reference's defects did instead (``DEFECTS``), to show the tests tell the two apart."""
    assert config.epochs == 1 and config.minibatches == 1
    before = per_agent_teams(config, info, before)
    buffer = copy.deepcopy(buffer)
    passed = ppo_value_pass(config, before, buffer)
    buffer.set_values(passed["values"], passed["final"], passed["last"])
    if config.recurrent:
        buffer.critic_hidden[...] = passed["critic_hidden"]
    normalizer = ValueNormalizer()
    normalizer.load_state(np.asarray(before["value_norm"]))
    targets = rollout_targets(config, buffer, normalizer)
    returns = targets.returns
    if defect == "value_norm_unused":
        returns = rollout_targets(
            config.model_copy(update={"value_norm": False}), buffer, ValueNormalizer()
        ).returns
    data = {
        "obs": buffer.obs, "state": buffer.state, "avail": buffer.avail_actions,
        "actions": buffer.actions, "log_prob_old": buffer.log_prob, "values_old": buffer.values,
        "returns": returns, "advantages": targets.advantages, "mask": buffer.agent_mask,
    }  # fmt: skip
    if config.recurrent:
        data["actor_hidden"], data["critic_hidden"] = buffer.actor_hidden, buffer.critic_hidden
    mb = _ppo_rows(config, buffer, data)
    stats = _ppo_terms(config, info, before, mb, normalizer, defect)
    stats["explained_variance"] = targets.explained_variance
    stats["target_mean"], stats["target_max"] = targets.target_mean, targets.target_max
    return stats


def _ppo_terms(
    config: PPOConfig, info: EnvInfo, before: Tensors, mb: dict[str, Array],
    normalizer: ValueNormalizer, defect: str | None,
) -> dict[str, float]:  # fmt: skip
    act = config.activation
    obs, mask = _f64(mb["obs"]), _f64(mb["mask"])
    out = agent_mlp(before, "actor", obs, mb.get("actor_hidden"), activation=act)
    critic_in = _critic_input(config, obs, mb["state"])
    values = agent_mlp(before, "critic", critic_in, mb.get("critic_hidden"), activation=act)[..., 0]
    if info.action_kind == "discrete":
        avail = _f64(mb["avail"])
        log_prob = dist.categorical_log_prob(N, out, mb["actions"], avail)
        entropy = dist.categorical_entropy(N, out, avail)
    else:
        log_std = np.broadcast_to(_f64(before["actor.log_std"]), out.shape)
        log_prob = dist.normal_log_prob(N, _f64(mb["actions"]), out, log_std)
        entropy = dist.normal_entropy(N, log_std)
    clip_eps = config.clip_eps * (0.5 if defect == "half_clip" else 1.0)
    policy = policy_loss(
        N, log_prob, _f64(mb["log_prob_old"]), _f64(mb["advantages"]), mask, clip_eps
    )
    if defect == "policy_loss_per_row":
        ratio = np.exp(log_prob - mb["log_prob_old"])
        adv = _f64(mb["advantages"])
        surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
        per_row = (surrogate * mask).sum(-1)
        policy = policy._replace(loss=-per_row.mean())
    returns, huber_delta = _f64(mb["returns"]), config.huber_delta
    if defect == "critic_on_old_values":
        returns = _f64(mb["values_old"])
    if defect == "huber_ignored":
        huber_delta = None
    value_mask = mask
    if defect == "masked_prediction":  # the mask on the prediction instead of on the loss
        values, value_mask = values * mask, np.ones_like(mask)
    if defect == "prediction_normalised":
        values = _f64(normalizer.normalize(values))
    loss_value = value_loss(
        N, values, _f64(mb["values_old"]), returns, value_mask, config.value_clip_eps, huber_delta
    )
    terms = ppo_loss(
        policy, loss_value, entropy_bonus(N, entropy, mask), config.value_coef, config.entropy_coef
    )
    return {name: N.item(value) for name, value in terms._asdict().items()}


WQMIX_AGENTS = ("agent", "central_agent", "target_central_agent")


def oracle_stats(
    algorithm: Algorithm, config: Any, info: EnvInfo, before: Tensors, after: Tensors, data: Any,
    defect: str | None = None,
) -> dict[str, float]:  # fmt: skip
    """The stats the oracle knows for one update of ``algorithm`` on ``data`` (a replay batch, or
    an untouched copy of the rollout), from the learner's state ``before`` and ``after`` it."""
    if algorithm == Algorithm.DDPG:
        return actor_critic_stats(DDPGNets(config, info), before, after, data)
    if algorithm == Algorithm.MADDPG:
        return actor_critic_stats(MADDPGNets(config, info), before, after, data)
    if algorithm == Algorithm.WQMIX:
        before = per_agent_teams(config, info, before, WQMIX_AGENTS)
    if algorithm == Algorithm.WQMIX and isinstance(data, EpisodeBatch):
        return wqmix_episode_stats(config, before, data)
    if algorithm == Algorithm.WQMIX:
        return wqmix_stats(config, before, data, defect)
    return ppo_stats(config, info, before, data, defect)
