"""MAPPO and IPPO: Yu et al., "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
Games", NeurIPS 2022 (Datasets and Benchmarks); de Witt et al., "Is Independent Learning All You
Need in the StarCraft Multi-Agent Challenge?", 2020.

Each agent acts with a stochastic policy pi(a_i | o_i) (categorical over the available actions, or a
diagonal Gaussian); a critic estimates values for GAE (Schulman et al., 2016), and both are trained
with PPO's clipped surrogate (Schulman et al., 2017) on minibatches of the latest rollout for a few
epochs. MAPPO's critic is centralised: it sees the global state (plus the agent's one-hot id). IPPO
is the same algorithm with a decentralised critic that sees only the agent's own observation: one
implementation, two configurations (TorchRL's ``IPPOLoss`` says the same).

The math (returns, distributions, losses, clipping) is in ``learners.functional``, written once,
and the learner's host side (memory, minibatches, stats, checkpoint layout) in
``learners.algorithms.ppo_learner``; each backend supplies the networks and the gradient step.
``docs/algorithms.md`` has the equations.

On a scenario with several teams (simple_tag, ...) every agent's advantages and value targets come
from its own rewards, and advantages are standardised within each team, so nothing is averaged
over opponents. ``share_parameters`` shares within a team, never across teams: each team has its
own actor and critic (``(T, ...)`` weights per layer, ``ppo_learner.seats``), whose members tell
themselves apart by their place in the team.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field, ValidationInfo, field_validator

from learners.config import AlgorithmConfig, LayerWidth
from learners.envs.teams import team_members
from learners.functional import distributions as dist
from learners.functional.losses import PPOLoss, entropy_bonus, policy_loss, ppo_loss, value_loss
from learners.functional.normalizer import ValueNormalizer
from learners.functional.numpy_ops import NumpyOps
from learners.functional.ops import A, Ops
from learners.functional.returns import gae, normalize_advantages

if TYPE_CHECKING:
    from learners.buffers.rollout import RolloutBuffer

# MPE episodes last 25 steps: a rollout of 100 steps per copy is four whole episodes, so rollouts
# (and checkpoints) fall on episode boundaries. The update: ten epochs of four minibatches (40
# gradient steps per rollout) took MAPPO's 2M-step mean on simple_spread over seeds 0-2 from -15.0
# (five epochs of one minibatch) to -12.2, at about twice the CPU per step; ten of eight was no
# better per env step and cost half as much again; rollouts of 25 steps (four times the updates of
# five epochs of one) ended seed 0 at -14.9 against -11.2. The step size: 7e-4 learned slowly; 2e-3
# fast, but some 1M-step runs' policies collapsed (entropy to ~0, agents walking off, returns
# near -50); 1e-3 collapsed fewer of the runs tried, not none. The discount: MPE episodes end only
# by time limit and bootstrap there, so gamma sets the horizon the critic predicts; 0.95
# (MADDPG's) took MAPPO's 1M-step mean over seeds 0-2 from -18.5 to -17.6 and IPPO's from -18.1
# to -17.3; 0.9 moved MAPPO's 2M-step mean by 0.3 (docs/algorithms.md, "How the MPE defaults were
# chosen", links the studies with their figures).
_MPE_DEFAULTS: Mapping[str, Any] = {
    "gamma": 0.95,
    "rollout_length": 100,
    "epochs": 10,
    "minibatches": 4,
    "learning_rate": 1e-3,
}


class PPOConfig(AlgorithmConfig):
    """Hyperparameters shared by MAPPO and IPPO. The defaults learn simple_spread_v3."""

    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {"mpe:*": _MPE_DEFAULTS}
    policy_fields: ClassVar[tuple[str, ...]] = (
        "hidden_sizes",
        "activation",
        "share_parameters",
        "share_across_groups",
        "recurrent",
        "rnn_hidden_size",
    )
    network_fields: ClassVar[tuple[str, ...]] = (*policy_fields, "value_norm")
    mutable_fields: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "gamma",
        "gae_lambda",
        "clip_eps",
        "value_clip_eps",
        "value_coef",
        "entropy_coef",
        "max_grad_norm",
    )
    horizon_fields: ClassVar[tuple[str, ...]] = ("linear_lr_decay",)
    centralised_critic: ClassVar[bool]
    """Whether the critic sees the global state (MAPPO) or only the agent's observation (IPPO)."""

    learning_rate: float = Field(default=5e-4, gt=0, le=1)
    """Adam step size of actor and critic (one optimiser over both, on the combined loss)."""
    linear_lr_decay: bool = True
    """Decay the step size linearly over the run, from ``learning_rate`` down to
    ``learning_rate * lr_end_factor`` at ``total_steps``."""
    lr_end_factor: float = Field(default=0.1, ge=0, le=1)
    """The fraction of ``learning_rate`` left at the end of the run when decay is on."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    """GAE's lambda: 0 is the one-step TD advantage, 1 the Monte-Carlo return minus the value."""
    rollout_length: int = Field(default=128, ge=1, le=100_000)
    """Steps each env copy takes per rollout; one update follows each rollout."""
    epochs: int = Field(default=10, ge=1, le=1000)
    """Passes over each rollout."""
    minibatches: int = Field(default=1, ge=1, le=4096)
    """Minibatches per epoch: the rollout is split into this many shuffled parts."""
    clip_eps: float = Field(default=0.2, gt=0, lt=1)
    """PPO's clip range: the probability ratio is clipped to [1 - clip_eps, 1 + clip_eps]."""
    value_clip_eps: float | None = Field(default=0.2, gt=0)
    """Clip the critic's change from its rollout prediction to this range (PPO-style value
    clipping); ``null`` turns value clipping off."""
    huber_delta: float | None = Field(default=10.0, gt=0)
    """Huber loss threshold of the critic's loss; ``null`` uses the squared error."""
    value_norm: bool = True
    """Normalise value targets with running mean/std statistics (the critic predicts normalised
    returns; advantages are computed on de-normalised values)."""
    advantage_norm: bool = True
    """Standardise advantages over each rollout (over live agents only), team by team on a
    scenario with several teams."""
    value_coef: float = Field(default=1.0, ge=0, le=100)
    """Weight of the critic's loss in the combined loss."""
    entropy_coef: float = Field(default=0.01, ge=0, le=10)
    """Weight of the entropy bonus (subtracted from the loss)."""
    max_grad_norm: float | None = Field(default=10.0, gt=0)
    """Clip the gradient of all parameters together to this global norm; ``null`` turns clipping
    off."""
    hidden_sizes: tuple[LayerWidth, ...] = Field(default=(64, 64), min_length=1, max_length=8)
    """Widths of the hidden layers of actor and critic."""
    activation: Literal["relu", "tanh"] = "relu"
    """Activation of the hidden layers."""
    share_parameters: bool = True
    """One actor and one critic shared by the agents of a team, told apart by a one-hot of their
    place in the team (on a cooperative scenario, one team: all agents, by their agent ids); each
    team of a competitive scenario has its own, and so does each group of a team
    (``share_across_groups``). ``false`` gives every agent its own parameters (computed together,
    in one batch)."""
    share_across_groups: bool = False
    """With ``share_parameters``: one actor and one critic for all the groups of a team, their
    inputs padded to the largest agent's (simple_speaker_listener's speaker and listener share
    them). ``false``: each group of a team (agents of the same spaces) has its own. An env whose
    teams are one group each trains the same either way. Specs stored before this field existed
    read as ``true``, as their runs were trained."""
    log_std_init: float = Field(default=-0.5, ge=-5, le=2)
    """Continuous actions: the initial log standard deviation of the Gaussian policy (a learned,
    state-independent parameter per action dimension)."""
    recurrent: bool = False
    """Put a GRU after the first hidden layer of actor and critic; training then runs on padded
    chunks of consecutive steps that start from the hidden state the rollout recorded."""
    rnn_hidden_size: int = Field(default=64, ge=1, le=4096)
    """Recurrent only: the GRU's hidden size."""
    chunk_length: int = Field(default=25, ge=1, le=10_000)
    """Recurrent only: the length of the training sequences; episodes are cut into chunks of at
    most this many steps and shorter chunks are padded (their padding masked out)."""

    @field_validator("minibatches")
    @classmethod
    def _minibatches_fit(cls, value: int, info: ValidationInfo) -> int:
        rollout_length = info.data.get("rollout_length")
        if rollout_length is not None and value > rollout_length:
            raise ValueError(f"cannot exceed rollout_length ({rollout_length})")
        return value

    @field_validator("chunk_length")
    @classmethod
    def _chunks_fit(cls, value: int, info: ValidationInfo) -> int:
        rollout_length = info.data.get("rollout_length")
        if info.data.get("recurrent") and rollout_length is not None and value > rollout_length:
            raise ValueError(f"cannot exceed rollout_length ({rollout_length})")
        return value


class MAPPOConfig(PPOConfig):
    """MAPPO: PPO with a centralised critic on the global state."""

    centralised_critic: ClassVar[bool] = True
    network_fields: ClassVar[tuple[str, ...]] = (*PPOConfig.network_fields, "agent_specific_state")
    agent_specific_state: bool = False
    """The critic sees the global state followed by the agent's own observation (Yu et al.'s
    agent-specific global state) instead of the global state alone."""


class IPPOConfig(PPOConfig):
    """IPPO: PPO with a decentralised critic on each agent's own observation."""

    centralised_critic: ClassVar[bool] = False


def agent_specific_state(config: PPOConfig) -> bool:
    """Whether the critic sees the agent's own observation after the global state (MAPPO with
    ``agent_specific_state``; IPPO's critic sees the observation alone)."""
    return isinstance(config, MAPPOConfig) and config.agent_specific_state


@dataclass(frozen=True)
class PPOStats:
    """What one PPO update reports, the same keys in every backend (means over its minibatches)."""

    loss: float
    loss_policy: float
    loss_value: float
    entropy: float
    approx_kl: float
    """Mean of (ratio - 1) - log ratio: how far the policy moved from the rollout's."""
    clip_fraction: float
    """Fraction of (step, agent) entries whose ratio was clipped."""
    grad_norm: float
    """Global gradient norm before clipping."""
    learning_rate: float
    explained_variance: float
    """1 - Var(returns - values) / Var(returns) of the rollout's values (reward units)."""
    target_mean: float
    """The mean of the critic's regression targets (GAE returns, reward units) over live agents."""
    target_max: float
    """The largest of them. A value target above any return the rewards allow (above 0 on
    simple_spread, where no reward is positive) is the critic bootstrapping from its own
    extrapolations: ``docs/algorithms.md``, "Policy collapse: the mechanism"."""

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class RolloutTargets:
    """The host-side part of an update: what the losses train towards, shaped (T, E, N)."""

    advantages: NDArray[np.float32]
    """GAE advantages (standardised when ``advantage_norm``); 0 under a zero mask."""
    returns: NDArray[np.float32]
    """The critic's regression target: GAE returns, normalised when ``value_norm`` is on."""
    mask: NDArray[np.float32]
    """The agent mask: 1 where the agent was alive at that step."""
    explained_variance: float
    target_mean: float
    """The mean GAE return (reward units, before normalisation) over live agents; NaN if none."""
    target_max: float
    """The largest GAE return (reward units) over live agents; NaN if none."""


def rollout_targets(
    config: PPOConfig, buffer: RolloutBuffer, normalizer: ValueNormalizer
) -> RolloutTargets:
    """GAE over the rollout on de-normalised values; then, with value normalisation on, the
    running statistics absorb the returns and the *targets* are normalised (reference defect
    ``value-normaliser``). The critic's predictions are never normalised again: they are already
    in normalised units."""
    values, next_values = buffer.values, buffer.next_values
    if config.value_norm:
        values = normalizer.denormalize(values)
        next_values = normalizer.denormalize(next_values)
    advantages, returns = gae(
        buffer.rewards,
        values,
        next_values,
        buffer.terminated[..., None],
        buffer.episode_end[..., None],
        config.gamma,
        config.gae_lambda,
    )
    mask = buffer.agent_mask
    explained = explained_variance(values, returns, mask)
    live = returns[mask > 0]
    target_mean = float(np.mean(live, dtype=np.float64)) if live.size else float("nan")
    target_max = float(np.max(live)) if live.size else float("nan")
    if config.value_norm:
        normalizer.update(returns, mask)
        returns = normalizer.normalize(returns)
    if config.advantage_norm:
        advantages = normalize_per_team(advantages, mask, buffer.info.teams)
    return RolloutTargets(advantages, returns, mask, explained, target_mean, target_max)


def normalize_per_team(
    advantages: NDArray[Any], mask: NDArray[Any], teams: Sequence[str]
) -> NDArray[np.float32]:
    """Advantages (..., N) standardised within each team: an opponent's advantages never shift or
    scale a team's (one team: the whole rollout at once, as before teams existed)."""
    out = np.zeros(advantages.shape, np.float32)
    for members in team_members(teams).values():
        out[..., members] = normalize_advantages(advantages[..., members], mask[..., members])
    return out


def minibatch_loss(
    ops: Ops[A],
    config: PPOConfig,
    mb: Mapping[str, A],
    out: A,
    values: A,
    log_prob: Callable[[A, A, A], A],
    entropy: Callable[[A, A], A],
) -> PPOLoss[A]:
    """PPO's loss on one minibatch (``ppo_learner.TrainingRows``' arrays), from the actor's output
    ``out`` and the critic's ``values`` (its output squeezed): the clipped surrogate, the critic's
    loss against the returns (never the old values: reference defect ``critic-on-old-values``) and
    the entropy bonus, masked means over live agents. ``log_prob(out, actions, avail)`` and
    ``entropy(out, avail)`` are the policy's distribution. The terms are built in a fixed order, the
    entropy last: a backend's autograd sums a tensor's gradient contributions in the order the graph
    was built."""
    mask = mb["mask"]
    policy = policy_loss(
        ops,
        log_prob(out, mb["actions"], mb["avail"]),
        mb["log_prob_old"],
        mb["advantages"],
        mask,
        config.clip_eps,
    )
    loss_value = value_loss(
        ops,
        values,
        mb["values_old"],
        mb["returns"],
        mask,
        config.value_clip_eps,
        config.huber_delta,
    )
    bonus = entropy_bonus(ops, entropy(out, mb["avail"]), mask)
    return ppo_loss(policy, loss_value, bonus, config.value_coef, config.entropy_coef)


def explained_variance(
    values: NDArray[np.float32], returns: NDArray[np.float32], mask: NDArray[np.float32]
) -> float:
    """1 - Var(returns - values) / Var(returns) over unmasked entries (NaN if returns are flat)."""
    keep = mask > 0
    var_returns = float(np.var(returns[keep])) if keep.any() else 0.0
    if var_returns == 0.0:
        return float("nan")
    return 1.0 - float(np.var((returns - values)[keep])) / var_returns


def learning_rate_at(config: PPOConfig, step: int, total_steps: int) -> float:
    """The step size after ``step`` of ``total_steps`` env steps: linear from ``learning_rate`` to
    ``learning_rate * lr_end_factor`` when decay is on, constant otherwise."""
    if not config.linear_lr_decay:
        return config.learning_rate
    progress = min(max(step / max(total_steps, 1), 0.0), 1.0)
    return config.learning_rate * (1.0 - (1.0 - config.lr_end_factor) * progress)


def sample_actions(
    out: NDArray[np.float32],
    avail_actions: NDArray[np.float32],
    log_std: NDArray[np.float32] | None,
    generator: np.random.Generator,
    explore: bool,
) -> tuple[NDArray[Any], NDArray[np.float32]]:
    """Actions and their log-probabilities from the actor's output (E, N, A), on the host.

    Acting needs the actions on the host anyway, and at this size NumPy's few microseconds per op
    beat a framework's dispatch, so every backend samples here with the shared distribution math
    over the NumPy ops (the update recomputes the log-probabilities on the backend). Discrete:
    ``out`` are logits; Gumbel-max, argmax(logits + Gumbel noise), is a categorical sample, and the
    greedy action is the argmax. Continuous: ``out`` is the mean and ``log_std`` the log standard
    deviation; the sample is mean + std * N(0, 1) (not clipped: the env adapter clips), the greedy
    action the mean.
    """
    ops = NumpyOps()
    if log_std is None:
        logits = dist.masked_logits(ops, out, avail_actions)
        if explore:
            logits = logits + generator.gumbel(size=out.shape)
        actions: NDArray[Any] = np.argmax(logits, axis=-1)
        log_prob = dist.categorical_log_prob(ops, out, actions, avail_actions)
    else:
        log_std = np.broadcast_to(log_std, out.shape)
        actions = out
        if explore:
            noise = generator.standard_normal(size=out.shape, dtype=np.float32)
            actions = (out + np.exp(log_std) * noise).astype(np.float32)
        log_prob = dist.normal_log_prob(ops, actions, out, log_std)
    return actions, log_prob.astype(np.float32)
