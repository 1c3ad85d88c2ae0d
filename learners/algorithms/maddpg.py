"""MADDPG: Lowe et al., "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments",
NeurIPS 2017.

Each agent has a deterministic actor on its own observation and a centralised critic Q_i(o_1..o_N,
a_1..a_N) that sees every agent's observation and action; the critics are only used in training, so
the agents act on their own observations. It is DDPG with a joint critic: the TD target, the losses,
soft target updates and Gaussian exploration are DDPG's (``learners.algorithms.ddpg``), applied per
agent with the agent mask, and each agent's target uses its own reward.

Discrete actions use the Gumbel-softmax relaxation (Jang et al., 2017): the actor outputs logits;
acting samples argmax(logits + Gumbel noise) when exploring and argmax(logits) when not; the critic
takes one-hot actions; the actor's update goes through a straight-through Gumbel-softmax sample
(one-hot forward, softmax gradient) and the target policy is the target actor's greedy one-hot.

The actor gradient is the paper's (eq. 6): agent i's actor ascends only its own critic Q_i, and
only through its own action a_i; the other agents' actions in Q_i's input are the replay buffer's,
with no gradient (``learners.functional.maddpg``, shared by every backend). So an actor is never
pushed up an opponent's Q, and a team's shared actor gets the sum of its members' own terms.

Parameters are shared within a team, never across teams (``EnvInfo.teams``; ``network_layout``):
on a cooperative scenario of one group the agents share one actor and one critic and tell
themselves apart by a one-hot agent id appended to their inputs (checkpoint names
``actor.layers...``, as before teams existed); on a scenario with several teams each team has its
own shared actor and critic (``actor.teams.<k>.layers...``, k the sharing set's index in the
order its first agent appears), and so does each group of a team unless ``share_across_groups``
(the speaker and the listener of simple_speaker_listener), with ids within the set;
``share_parameters=false`` gives every agent its own networks (``actor.agents.<i>...``).

``centralised_critic=false`` is the paper's DDPG baseline: independent DDPG learners, each agent's
critic Q_i(o_i, a_i) seeing only its own observation and action (as IPPO is MAPPO with a
decentralised critic); everything else, parameter sharing within a team included, is unchanged.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from learners import rng as rngs
from learners.algorithms.ddpg import DDPGConfig, DDPGLearner
from learners.envs.base import EnvInfo, Observation
from learners.envs.teams import team_indices


class MADDPGConfig(DDPGConfig):
    """Hyperparameters of MADDPG (DDPG's, plus parameter sharing and the Gumbel temperature)."""

    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "mpe:*": {
            "gamma": 0.95,
            "tau": 0.01,
            "hidden_sizes": (64, 64),
            "batch_size": 256,
            "buffer_size": 200_000,
            "learning_starts": 2000,
            "updates_per_step": 0.125,
            "learning_rate_actor": 1e-3,
            "learning_rate_critic": 1e-3,
            "max_grad_norm": 0.5,
        },
    }

    policy_fields: ClassVar[tuple[str, ...]] = (
        "hidden_sizes",
        "share_parameters",
        "share_across_groups",
    )
    network_fields: ClassVar[tuple[str, ...]] = (*policy_fields, "centralised_critic")
    mutable_fields: ClassVar[tuple[str, ...]] = (
        *DDPGConfig.mutable_fields,
        "gumbel_temperature",
    )

    share_parameters: bool = True
    """One actor and one critic per team, shared by the team's agents and told apart by one-hot
    agent ids (never shared across teams: a cooperative scenario's one team shares one of each);
    ``false`` gives each agent its own actor and critic. Each group of a team has its own pair
    too, unless ``share_across_groups``."""
    share_across_groups: bool = False
    """With ``share_parameters``: one actor and one critic for all the groups of a team, their
    inputs padded to the largest agent's (simple_speaker_listener's speaker and listener share
    them). ``false``: each group of a team (agents of the same spaces) has its own pair. An env
    whose teams are one group each trains the same either way. Specs stored before this field
    existed read as ``true``, as their runs were trained."""
    centralised_critic: bool = True
    """Each agent's critic Q_i sees every agent's observation and action (MADDPG); ``false``: only
    its own, Q_i(o_i, a_i): independent DDPG learners, the paper's DDPG baseline."""
    gumbel_temperature: float = Field(default=1.0, gt=0, le=100)
    """Temperature of the Gumbel-softmax relaxation of discrete actions (unused for continuous)."""


NetworkLayout = Literal["shared", "teams", "agents"]
"""How MADDPG's agents hold their networks: one pair for every agent (one sharing set, shared),
one pair per sharing set (several teams, or a team's groups; checkpoint names
``actor.teams.<k>...``), or one pair per agent (``share_parameters=false``)."""


def sharing_sets(config: MADDPGConfig, info: EnvInfo) -> tuple[tuple[int, ...], ...]:
    """The agent indices of each sharing set (``EnvInfo.sharing_sets``), in the order their first
    agent appears: what ``PerTeamMLP`` builds one network for."""
    return team_indices(info.sharing_sets(across_groups=config.share_across_groups))


def network_layout(config: MADDPGConfig, info: EnvInfo) -> NetworkLayout:
    """The layout ``config`` asks for on ``info``'s agents: sharing stops at a team's edge, and at
    a group's unless ``share_across_groups``."""
    if not config.share_parameters:
        return "agents"
    return "shared" if len(sharing_sets(config, info)) == 1 else "teams"


def input_dims(
    info: EnvInfo, layout: NetworkLayout, *, centralised_critic: bool = True
) -> tuple[int, int]:
    """The actor's and the critic's input widths: the own observation, and every agent's
    observation and action (centralised) or the agent's own (decentralised), plus the N-wide
    one-hot id appended outside the network when one network serves every agent (per-team
    networks append their own ids within the team)."""
    ids = info.num_agents if layout == "shared" else 0
    seen = info.num_agents if centralised_critic else 1
    return info.obs_dim + ids, seen * (info.obs_dim + info.action_dim) + ids


def explore_discrete(
    logits: NDArray[np.float32], avail_actions: NDArray[np.float32], rng: np.random.Generator
) -> NDArray[np.int64]:
    """A Gumbel-max sample per agent: argmax(logits + Gumbel noise) over the available actions,
    i.e. a draw from softmax(logits) restricted to them."""
    scores = logits + rng.gumbel(size=logits.shape).astype(np.float32)
    scores = np.where(avail_actions > 0.5, scores, -np.inf)
    actions: NDArray[np.int64] = np.argmax(scores, axis=-1).astype(np.int64)
    return actions


def greedy_discrete(
    logits: NDArray[np.float32], avail_actions: NDArray[np.float32]
) -> NDArray[np.int64]:
    """argmax(logits) over the available actions."""
    scores = np.where(avail_actions > 0.5, logits, -np.inf)
    actions: NDArray[np.int64] = np.argmax(scores, axis=-1).astype(np.int64)
    return actions


class MADDPGLearner(DDPGLearner):
    """What MADDPG adds on the host to a backend's DDPG learner, written once: both action kinds,
    acting on discrete actions (Gumbel-max exploration from ``rng/exploration``, greedy otherwise)
    and the ``rng/gumbel`` generator of the actor update's Gumbel-softmax samples, checkpointed
    beside DDPG's state. A backend lists it before its DDPG learner (``class
    TorchMADDPG(MADDPGLearner, TorchDDPG)``) and supplies the networks and ``_actor_logits``."""

    config: MADDPGConfig

    def __init__(self, config: MADDPGConfig, info: EnvInfo, device: str, seed: int) -> None:
        self.discrete = info.action_kind == "discrete"
        self.layout = network_layout(config, info)
        # The next class in the MRO is the backend's DDPG learner, which takes the device.
        super().__init__(config, info, device, seed)  # type: ignore[call-arg, arg-type]
        self.gumbel = rngs.generator(seed, "gumbel")

    def _check_info(self, info: EnvInfo) -> None:
        if info.action_kind not in ("continuous", "discrete"):
            raise ValueError(f"unknown action kind {info.action_kind}")

    @abstractmethod
    def _actor_logits(self, observation: Observation) -> NDArray[np.float32]:
        """The live actors' logits (E, N, action_dim) on the host, before any action mask."""

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Continuous: DDPG's. Discrete: a Gumbel-max draw over the available actions when
        ``explore``, else the greedy available action."""
        if not self.discrete:
            return super().act(observation, explore=explore)
        logits = self._actor_logits(observation)
        if explore:
            return explore_discrete(logits, observation.avail_actions, self.rng)
        return greedy_discrete(logits, observation.avail_actions)

    def state(self) -> dict[str, NDArray[Any]]:
        tensors = super().state()
        tensors["rng/gumbel"] = rngs.state_tensor(self.gumbel)
        return tensors

    def load_state(self, tensors: Mapping[str, NDArray[Any]], *, policy_only: bool = False) -> None:
        super().load_state(tensors, policy_only=policy_only)
        if not policy_only:
            rngs.restore(self.gumbel, tensors["rng/gumbel"])
