"""The NumPy oracle of the learners: their networks' forward passes read straight from a portable
checkpoint's tensors (PyTorch layout), and the losses of one update computed from them with the
shared math over ``NumpyOps`` in float64.

Backend-against-backend parity cannot notice a defect that every backend shares; this can. A
learner's reported stats must equal what the textbook update computes from the same weights and
batch, whichever backend it runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.algorithms.ddpg import DDPGConfig, actor_loss, critic_loss
from learners.algorithms.ppo import PPOConfig, rollout_targets
from learners.buffers.replay import ReplayBatch
from learners.buffers.rollout import RolloutBuffer
from learners.envs.base import EnvInfo
from learners.functional import distributions as dist
from learners.functional.losses import entropy_bonus, policy_loss, ppo_loss, value_loss
from learners.functional.normalizer import ValueNormalizer
from learners.functional.numpy_ops import NumpyOps
from learners.functional.returns import td_target

Array = NDArray[Any]
Tensors = Mapping[str, Array]
N = NumpyOps()


def _f64(x: Array) -> Array:
    return np.asarray(x, dtype=np.float64)


def mlp(tensors: Tensors, prefix: str, x: Array, *, tanh_output: bool) -> Array:
    """``learners.backends.*.networks.MLP``: Linear layers at even indices, ReLU between."""
    indices = sorted({int(k.split(".")[2]) for k in tensors if k.startswith(f"{prefix}.layers.")})
    h = _f64(x)
    for n, i in enumerate(indices):
        h = h @ _f64(tensors[f"{prefix}.layers.{i}.weight"]).T + _f64(tensors[f"{prefix}.layers.{i}.bias"])
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


def _gru(tensors: Tensors, prefix: str, y: Array, h: Array) -> Array:
    """PyTorch's GRU cell over a time-first sequence; returns every step's state."""
    gates = _agent_linear(tensors, f"{prefix}.gru.input", y)
    outputs = []
    for t in range(y.shape[0]):
        x_r, x_z, x_n = np.split(gates[t], 3, axis=-1)
        h_r, h_z, h_n = np.split(_agent_linear(tensors, f"{prefix}.gru.hidden", h), 3, axis=-1)
        r, z = _sigmoid(x_r + h_r), _sigmoid(x_z + h_z)
        n = np.tanh(x_n + r * h_n)
        h = (1.0 - z) * n + z * h
        outputs.append(h)
    return np.stack(outputs)


def agent_mlp(
    tensors: Tensors, prefix: str, x: Array, h: Array | None, *, activation: str
) -> Array:
    """``AgentMLP``: one-hot ids for shared weights, optional GRU after the first hidden layer.
    ``x`` is ``(..., N, in)`` (time first ``(L, B, N, in)`` with a hidden state ``h``)."""
    act = np.tanh if activation == "tanh" else (lambda v: np.maximum(v, 0.0))
    y = _f64(x)
    if _f64(tensors[f"{prefix}.layers.0.weight"]).ndim == 2:
        num_agents = y.shape[-2]
        ids = np.broadcast_to(np.eye(num_agents), (*y.shape[:-1], num_agents))
        y = np.concatenate([y, ids], axis=-1)
    layers = sorted({int(k.split(".")[2]) for k in tensors if k.startswith(f"{prefix}.layers.")})
    y = act(_agent_linear(tensors, f"{prefix}.layers.0", y))
    if f"{prefix}.gru.input.weight" in tensors:
        assert h is not None
        y = _gru(tensors, prefix, y, _f64(h))
    for i in layers[1:]:
        y = act(_agent_linear(tensors, f"{prefix}.layers.{i}", y))
    return _agent_linear(tensors, f"{prefix}.head", y)


# -- DDPG -------------------------------------------------------------------------------------


def ddpg_stats(
    config: DDPGConfig, before: Tensors, after: Tensors, batch: ReplayBatch
) -> dict[str, float]:
    """The losses of one DDPG update: the critic's from the weights ``before`` it, the actor's
    from the actor before and the critic after the critic's step (the order of the update)."""

    def q(tensors: Tensors, prefix: str, obs: Array, actions: Array) -> Array:
        return mlp(tensors, prefix, np.concatenate([_f64(obs), actions], -1), tanh_output=False)[..., 0]

    next_actions = mlp(before, "target_actor", batch.next_obs, tanh_output=True)
    q_next = q(before, "target_critic", batch.next_obs, next_actions)
    target = td_target(N, _f64(batch.rewards), q_next, _f64(batch.terminated)[:, None], config.gamma)
    q_taken = q(before, "critic", batch.obs, _f64(batch.actions))
    mask = _f64(batch.agent_mask)
    policy_actions = mlp(before, "actor", batch.obs, tanh_output=True)
    q_policy = q(after, "critic", batch.obs, policy_actions)
    return {
        "loss_critic": N.item(critic_loss(N, q_taken, target, mask)),
        "loss_actor": N.item(actor_loss(N, q_policy, mask)),
        "q_value": float(q_taken.mean()),
        "td_target": float(target.mean()),
    }


def ddpg_critic_bias_gradient(
    config: DDPGConfig, before: Tensors, batch: ReplayBatch
) -> float:
    """d loss_critic / d (the critic's output bias) = masked mean of 2 (Q - y): the gradient the
    critic's last bias must receive when nothing flows into the target (seeds defect 8)."""
    next_actions = mlp(before, "target_actor", batch.next_obs, tanh_output=True)
    critic_in = np.concatenate([_f64(batch.next_obs), next_actions], -1)
    q_next = mlp(before, "target_critic", critic_in, tanh_output=False)[..., 0]
    target = _f64(batch.rewards) + config.gamma * (1.0 - _f64(batch.terminated)[:, None]) * q_next
    taken_in = np.concatenate([_f64(batch.obs), _f64(batch.actions)], -1)
    q_taken = mlp(before, "critic", taken_in, tanh_output=False)[..., 0]
    mask = _f64(batch.agent_mask)
    return float((2.0 * (q_taken - target) * mask).sum() / max(mask.sum(), 1.0))


# -- PPO --------------------------------------------------------------------------------------


def _ppo_rows(config: PPOConfig, buffer: RolloutBuffer, data: dict[str, Array]) -> dict[str, Array]:
    """The rollout arranged as the learners train on it: (T*E, ...) rows, or time-first chunks
    whose padding is masked out."""
    if not config.recurrent:
        rows = buffer.length * buffer.info.num_envs
        return {k: v.reshape(rows, *v.shape[2:]) for k, v in data.items()}
    chunks = buffer.chunks(config.chunk_length)
    out = {k: np.swapaxes(chunks.gather(v), 0, 1) for k, v in data.items()}
    out["mask"] = out["mask"] * chunks.filled.T[..., None]
    out["actor_hidden"] = chunks.first(buffer.actor_hidden)
    out["critic_hidden"] = chunks.first(buffer.critic_hidden)
    return out


def ppo_stats(
    config: PPOConfig, info: EnvInfo, before: Tensors, buffer: RolloutBuffer
) -> dict[str, float]:
    """The loss terms of a PPO update that takes one gradient step on the whole rollout (one epoch,
    one minibatch: a masked mean does not depend on the order of the rows)."""
    assert config.epochs == 1 and config.minibatches == 1
    normalizer = ValueNormalizer()
    normalizer.load_state(np.asarray(before["value_norm"]))
    targets = rollout_targets(config, buffer, normalizer)
    data = {
        "obs": buffer.obs, "state": buffer.state, "avail": buffer.avail_actions,
        "actions": buffer.actions, "log_prob_old": buffer.log_prob, "values_old": buffer.values,
        "returns": targets.returns, "advantages": targets.advantages, "mask": buffer.agent_mask,
    }  # fmt: skip
    mb = _ppo_rows(config, buffer, data)
    obs = _f64(mb["obs"])
    critic_in = obs
    if config.centralised_critic:
        state = _f64(mb["state"])[..., None, :]
        critic_in = np.broadcast_to(state, (*obs.shape[:-1], state.shape[-1]))
    out = agent_mlp(before, "actor", obs, mb.get("actor_hidden"), activation=config.activation)
    values = agent_mlp(
        before, "critic", critic_in, mb.get("critic_hidden"), activation=config.activation
    )[..., 0]
    mask = _f64(mb["mask"])
    if info.action_kind == "discrete":
        avail = _f64(mb["avail"])
        log_prob = dist.categorical_log_prob(N, out, mb["actions"], avail)
        entropy = dist.categorical_entropy(N, out, avail)
    else:
        log_std = np.broadcast_to(_f64(before["actor.log_std"]), out.shape)
        log_prob = dist.normal_log_prob(N, _f64(mb["actions"]), out, log_std)
        entropy = dist.normal_entropy(N, log_std)
    policy = policy_loss(
        N, log_prob, _f64(mb["log_prob_old"]), _f64(mb["advantages"]), mask, config.clip_eps
    )
    loss_value = value_loss(
        N, values, _f64(mb["values_old"]), _f64(mb["returns"]), mask,
        config.value_clip_eps, config.huber_delta,
    )  # fmt: skip
    terms = ppo_loss(
        policy, loss_value, entropy_bonus(N, entropy, mask), config.value_coef, config.entropy_coef
    )
    stats = {name: N.item(value) for name, value in terms._asdict().items()}
    stats["explained_variance"] = targets.explained_variance
    return stats
