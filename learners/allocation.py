"""What each algorithm allocates for a run, worked out from its config and its env's shape.

Exact where the learners' own code fixes the number: the buffers byte for byte as
``learners.buffers`` allocates them, and the parameters of every network as the backends build
them (tests/learners/test_budget.py holds both to the real objects). Approximate where a framework
decides: the floats one batch leaves behind in a forward pass (the input and every layer's output
over the batch's rows), which ``learners.admission.memory`` multiplies by what each framework keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from learners.algorithms.ddpg import DDPGConfig
from learners.algorithms.maddpg import MADDPGConfig
from learners.algorithms.ppo import PPOConfig, agent_specific_state
from learners.algorithms.wqmix import WQMIXConfig
from learners.config import AlgorithmConfig
from learners.envs.shapes import EnvShape

F32 = 4
I64 = 8


@dataclass(frozen=True)
class Plan:
    """What an algorithm allocates for a run."""

    buffer_name: str
    buffer_field: str
    """The hyperparameter that sizes the buffer."""
    buffer_bytes: int
    live_params: int
    """Parameters of the networks an optimiser trains."""
    target_params: int
    """Parameters of the target networks (copies, not trained)."""
    host_bytes: int
    """The update's arrays on the host: sampled batches, PPO's targets and minibatch copies."""
    train_floats: int
    """One gradient step's forward pass over its batch: input and layer outputs."""
    value_floats: int
    """PPO's value pass over the whole rollout (no gradient); 0 for the others."""
    update_field: str
    """The hyperparameter that sizes the update."""


def _avail(shape: EnvShape) -> int:
    return shape.action_dim if shape.discrete else 0


def _action_bytes(shape: EnvShape) -> int:
    """One agent's stored action: an int64 index, or a float32 vector."""
    return I64 if shape.discrete else F32 * shape.action_dim


# -- buffers --------------------------------------------------------------------------------------


def replay_row_bytes(shape: EnvShape, *, with_state: bool) -> int:
    """One row of ``ReplayBuffer``: obs and next obs, state and next state (if kept), actions,
    rewards, terminated, agent mask, available actions now and next."""
    n, d, s = shape.num_agents, shape.obs_dim, shape.state_dim if with_state else 0
    floats = 2 * n * d + 2 * s + n + 1 + n + 2 * n * _avail(shape)
    return F32 * floats + n * _action_bytes(shape)


def episode_bytes(shape: EnvShape) -> int:
    """One episode of ``EpisodeBuffer``, padded to the time limit T: T+1 observations, states and
    available actions; T actions, rewards, agent masks, terminated and filled flags."""
    n, d, s, t = shape.num_agents, shape.obs_dim, shape.state_dim, shape.max_episode_steps
    floats = (t + 1) * (n * d + s + n * _avail(shape)) + t * (2 * n + 2)
    return F32 * floats + t * n * _action_bytes(shape)


def rollout_bytes(shape: EnvShape, length: int, num_envs: int, hidden_size: int | None) -> int:
    """``RolloutBuffer(info, length, hidden_size)``: per step and copy the obs, final obs, states,
    masks, actions, log-probabilities, rewards, values, next values, two flags and (recurrent)
    both networks' GRU states; plus the observation the rollout stopped at."""
    n, d, s = shape.num_agents, shape.obs_dim, shape.state_dim
    per_step = F32 * (2 * n * d + 2 * s + n * (5 + _avail(shape))) + n * _action_bytes(shape) + 2
    if hidden_size is not None:
        per_step += 2 * F32 * n * hidden_size
    return length * num_envs * per_step + num_envs * F32 * (n * d + s)


# -- networks -------------------------------------------------------------------------------------


def mlp_params(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> int:
    """Weights and biases of ``in -> hidden... -> out``."""
    sizes = [in_dim, *hidden, out_dim]
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))


def agent_mlp_params(
    in_dim: int,
    hidden: tuple[int, ...],
    out_dim: int,
    n: int,
    shared: bool,
    rnn: int | None,
    teams: tuple[int, ...] = (),
) -> int:
    """An ``AgentMLP``: shared (one-hot ids appended to the input), shared within each of several
    teams (``teams``: their sizes; one set per team, ids as wide as the largest team) or one per
    agent, with a GRU after the first hidden layer when ``rnn`` is its size."""
    ids, count = (0, n) if not shared else (n, 1)
    if shared and len(teams) > 1:
        ids, count = max(teams), len(teams)
    if rnn is None:
        one = mlp_params(in_dim + ids, hidden, out_dim)
    else:
        first = (in_dim + ids) * hidden[0] + hidden[0]
        gru = hidden[0] * 3 * rnn + rnn * 3 * rnn + 6 * rnn
        one = first + gru + mlp_params(rnn, hidden[1:], out_dim)
    return count * one


def _width(in_dim: int, hidden: tuple[int, ...], out_dim: int, rnn: int | None = None) -> int:
    """Floats one row leaves behind in a forward pass: input, every layer's output, GRU gates."""
    return in_dim + sum(hidden) + out_dim + (4 * rnn if rnn is not None else 0)


# -- the algorithms -------------------------------------------------------------------------------


def _ddpg_plan(cfg: DDPGConfig, shape: EnvShape) -> Plan:
    n, d, a, h = shape.num_agents, shape.obs_dim, shape.action_dim, cfg.hidden_sizes
    maddpg = isinstance(cfg, MADDPGConfig)
    shared = cfg.share_parameters if isinstance(cfg, MADDPGConfig) else True
    ids = n if maddpg and shared else 0
    actor_in = d + ids
    # MADDPG's critic sees the joint observation and action; DDPG's, and MADDPG's with
    # centralised_critic false (independent learners), the agent's own.
    centralised = isinstance(cfg, MADDPGConfig) and cfg.centralised_critic
    joint = n * (d + a) if centralised else d + a
    critic_in = joint + ids
    sets = shape.set_sizes(cfg.share_across_groups) if isinstance(cfg, MADDPGConfig) else ()
    if maddpg and shared and len(sets) > 1:
        # One actor and one critic per team (or group), its agents told apart by ids within it.
        params = sum(mlp_params(d + k, h, a) + mlp_params(joint + k, h, 1) for k in sets)
    else:
        copies = 1 if shared else n
        params = copies * (mlp_params(actor_in, h, a) + mlp_params(critic_in, h, 1))
    row = replay_row_bytes(shape, with_state=False)
    # Actor on s (live) and s' (target); critic on (s, a), (s', a') and (s, mu(s)), each on
    # every agent's row (MADDPG's critic input is the joint one, copied per agent).
    per_row = 2 * _width(actor_in, h, a) + 3 * _width(critic_in, h, 1)
    return Plan(
        buffer_name="replay buffer",
        buffer_field="hyperparameters.buffer_size",
        buffer_bytes=(cfg.buffer_size + cfg.batch_size) * row,  # and the sampled batch
        live_params=params,
        target_params=params,
        host_bytes=2 * cfg.batch_size * row,  # the batch as framework tensors
        train_floats=cfg.batch_size * n * per_row,
        value_floats=0,
        update_field="hyperparameters.batch_size",
    )


def _wqmix_plan(cfg: WQMIXConfig, shape: EnvShape, num_envs: int) -> Plan:
    n, d, a, s = shape.num_agents, shape.obs_dim, shape.action_dim, shape.state_dim
    h = cfg.hidden_sizes
    rnn = cfg.rnn_hidden_size if cfg.recurrent else None
    groups = shape.set_sizes(cfg.share_across_groups)
    agent = agent_mlp_params(d, h, a, n, cfg.share_parameters, rnn, groups)
    hh, embed = cfg.hypernet_hidden, cfg.mixing_embed_dim
    central = (cfg.central_mixer_hidden,) * cfg.central_mixer_layers
    mixer = mlp_params(s, (hh,), n * embed) + mlp_params(s, (), embed)
    mixer += mlp_params(s, (hh,), embed) + mlp_params(s, (embed,), 1)
    central_mixer = mlp_params(n + s, central, 1)
    if cfg.central_mixer_value:
        central_mixer += mlp_params(s, (cfg.central_mixer_hidden,), 1)
    # Per row (a transition, or a step of a sampled episode): four agent passes and one to spare
    # (QMIX and central agents on o, greedy and target ones on o'), the QMIX mixer and its
    # hypernetworks' outputs, the central mixer live and target.
    per_row = 5 * n * _width(d + n, h, a, rnn) + 2 * (s + 2 * hh + 2 * n * embed + 4 * embed)
    per_row += 2 * _width(n + s, central, 1)
    if cfg.central_mixer_value:
        per_row += 2 * _width(s, (cfg.central_mixer_hidden,), 1)
    if cfg.recurrent:
        episode = episode_bytes(shape)
        rows = cfg.episode_batch_size * (shape.max_episode_steps + 1)
        batch = 3 * cfg.episode_batch_size * episode  # the batch, time-first, as tensors
        buffer_bytes = (cfg.episode_buffer_size + num_envs) * episode  # and the staged episodes
        name, field, update_field = "episode buffer", "episode_buffer_size", "episode_batch_size"
    else:
        row = replay_row_bytes(shape, with_state=True)
        rows, batch = cfg.batch_size, 2 * cfg.batch_size * row
        buffer_bytes = (cfg.buffer_size + cfg.batch_size) * row
        name, field, update_field = "replay buffer", "buffer_size", "batch_size"
    return Plan(
        buffer_name=name,
        buffer_field=f"hyperparameters.{field}",
        buffer_bytes=buffer_bytes,
        live_params=2 * agent + mixer + central_mixer,
        target_params=agent + central_mixer,
        host_bytes=batch,
        train_floats=rows * per_row,
        value_floats=0,
        update_field=f"hyperparameters.{update_field}",
    )


def _ppo_plan(cfg: PPOConfig, shape: EnvShape, num_envs: int, copies_broadcast: bool) -> Plan:
    n, d, a, s = shape.num_agents, shape.obs_dim, shape.action_dim, shape.state_dim
    h = cfg.hidden_sizes
    rnn = cfg.rnn_hidden_size if cfg.recurrent else None
    critic_in = s if cfg.centralised_critic else d
    agent_specific = agent_specific_state(cfg)
    if agent_specific:
        critic_in += d
    # Shared within each team (and group), never across: one set per team on a scenario with
    # several.
    teams = shape.set_sizes(cfg.share_across_groups)
    by_team = cfg.share_parameters and len(teams) > 1
    sets = len(teams) if by_team else 1 if cfg.share_parameters else n
    log_std = 0 if shape.discrete else a * sets
    params = agent_mlp_params(d, h, a, n, cfg.share_parameters, rnn, teams) + log_std
    params += agent_mlp_params(critic_in, h, 1, n, cfg.share_parameters, rnn, teams)
    steps = cfg.rollout_length * num_envs
    # What the update trains on, per step: obs, state, available actions, actions and five
    # per-agent floats (old log-prob, old value, return, advantage, mask).
    row = F32 * (n * d + s + n * _avail(shape) + 5 * n) + n * _action_bytes(shape)
    copies = 2 / cfg.minibatches + (1 if cfg.recurrent else 0)  # minibatch, tensors; chunks
    targets = 5 * F32 * steps * n  # GAE's advantages, returns and their temporaries
    # A shared centralised critic's state is read once per step when the framework broadcasts it
    # over the agents without copying it (PyTorch); otherwise each agent has its own input.
    once = (
        cfg.centralised_critic
        and cfg.share_parameters
        and not by_team
        and not copies_broadcast
        and not agent_specific
    )
    ids = (max(teams) if by_team else n) if cfg.share_parameters else 0
    step_input = critic_in if once else n * (critic_in + ids)
    minibatch = math.ceil(steps / cfg.minibatches)
    train = minibatch * (n * _width(d, h, a, rnn) + step_input + n * _width(0, h, 1, rnn))
    # The value pass: the critic over every step's observation and final one.
    values = (2 * steps + num_envs) * (step_input + 2 * n * max(h))
    return Plan(
        buffer_name="rollout buffer",
        buffer_field="hyperparameters.rollout_length",
        buffer_bytes=rollout_bytes(shape, cfg.rollout_length, num_envs, rnn),
        live_params=params,
        target_params=0,
        host_bytes=int(copies * steps * row) + targets,
        train_floats=train,
        value_floats=values,
        update_field="hyperparameters.minibatches",
    )


def plan(
    config: AlgorithmConfig, shape: EnvShape, num_envs: int, *, copies_broadcast: bool
) -> Plan:
    """What ``config``'s algorithm allocates on ``num_envs`` copies of an env of ``shape``;
    ``copies_broadcast`` when the framework copies a tensor it broadcasts (TensorFlow and
    MindSpore do, PyTorch does not)."""
    if isinstance(config, DDPGConfig):  # and MADDPG
        return _ddpg_plan(config, shape)
    if isinstance(config, WQMIXConfig):
        return _wqmix_plan(config, shape, num_envs)
    if isinstance(config, PPOConfig):
        return _ppo_plan(config, shape, num_envs, copies_broadcast)
    raise TypeError(f"learners.allocation has no plan for {type(config).__name__}: add one")
