"""What the parity suite runs for each algorithm: small configurations that switch every branch
on (recurrent, per-agent weights, both action kinds, clipping that actually clips), synthetic data
with zeros in every mask, and how one update is driven.

The suite is parametrised over the registry: a learner is covered as soon as its backend is
registered for its algorithm. An algorithm needs one entry in ``VARIANTS`` and in ``DATA``. A
variant that only some backends have built yet names them (``Variant.backends``); the others skip
it until they list themselves there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from learners.algorithms.ddpg import DDPGConfig
from learners.algorithms.maddpg import MADDPGConfig
from learners.algorithms.ppo import IPPOConfig, MAPPOConfig, PPOConfig
from learners.algorithms.wqmix import WQMIXConfig
from learners.buffers.episodes import EpisodeBatch
from learners.buffers.replay import ReplayBatch
from learners.buffers.rollout import RolloutBuffer
from learners.config import AlgorithmConfig
from learners.enums import Algorithm, Backend
from learners.envs.base import EnvInfo, Observation
from learners.registry import RunnerKind, built_pairs, entry

REFERENCE = Backend.TORCH
"""The backend every other backend is compared with."""

# Off-policy batches are smaller than the configured batch size on purpose: a learner that builds
# a tensor from ``config.batch_size`` instead of the batch's real size fails (reference defect
# ids-from-config-batch-size).
BATCH = 7
ROLLOUT = 12
# Recurrent WQMIX episodes are padded to this many steps (the learner reads T from the batch).
EPISODE_STEPS = 6
# The on-policy step axis for learning-rate decay: update ``k`` happens at env step k * DECAY_STEP.
DECAY_STEP, DECAY_TOTAL = 36, 400
# A recurrent rollout trains on chunks of consecutive steps, as many as its episode boundaries
# make (9 to 15 here, by seed). A compiled backend builds its update once per input shape (the
# learners round chunk counts up to a few sizes), and the seeds of the ten-update tests met more
# than one: MindSpore compiled a variant's update again (10 to 13 s here) at every new size, and
# TensorFlow retraced. Every rollout of a recurrent variant is drawn with this many chunks.
RECURRENT_CHUNKS = 12


@dataclass(frozen=True)
class Variant:
    """One configuration of one algorithm on one env shape."""

    name: str
    config: AlgorithmConfig
    info: EnvInfo
    backends: frozenset[Backend] | None = None
    """The backends that have built this variant (``None``: every backend of the algorithm)."""


def env_info(
    num_agents: int,
    action_kind: str,
    action_dim: int,
    num_envs: int = 3,
    teams: tuple[str, ...] | None = None,
    groups: bool = False,
) -> EnvInfo:
    """A synthetic env's shapes; every agent on one team unless ``teams`` names them. ``groups``:
    the first agent is a group of its own (a speaker) with a smaller observation and action than
    the others (listeners), padded as ``learners.envs.parallel`` pads them."""
    continuous = action_kind == "continuous"
    teams = teams or ("agent",) * num_agents
    obs_dims, action_dims = (5,) * num_agents, (action_dim,) * num_agents
    names: tuple[str, ...] = ()
    if groups:
        obs_dims = (3,) + obs_dims[1:]
        action_dims = (action_dim - 1,) + action_dims[1:]
        names = ("speaker",) + ("listener",) * (num_agents - 1)
    return EnvInfo(
        num_envs=num_envs,
        num_agents=num_agents,
        agent_ids=tuple(f"{team}_{i}" for i, team in enumerate(teams)),
        teams=teams,
        obs_dim=5,
        obs_dims=obs_dims,
        state_dim=7,
        action_kind=action_kind,
        action_dim=action_dim,
        action_low=-np.ones(action_dim, np.float32) if continuous else None,
        action_high=np.ones(action_dim, np.float32) if continuous else None,
        max_episode_steps=25,
        groups=names,
        action_dims=action_dims if groups else (),
    )


def _ddpg_variants() -> list[Variant]:
    info = env_info(1, "continuous", 2)
    base = {"hidden_sizes": (16, 16), "batch_size": 32, "tau": 0.05, "gamma": 0.9}
    return [
        Variant("plain", DDPGConfig(**base), info),
        Variant("clipped", DDPGConfig(**base, max_grad_norm=1e-3), info),
    ]


def _maddpg_variants() -> list[Variant]:
    variants = []
    for kind, shared in itertools.product(("continuous", "discrete"), (True, False)):
        config = MADDPGConfig(
            hidden_sizes=(16, 16), batch_size=32, tau=0.05, gamma=0.9, max_grad_norm=0.5,
            share_parameters=shared, gumbel_temperature=0.7,
        )  # fmt: skip
        info = env_info(3, kind, 2 if kind == "continuous" else 5)
        variants.append(Variant(f"{kind}-{'shared' if shared else 'separate'}", config, info))
        if shared:  # two teams, one agent between the other's two: a shared network per team
            teams = env_info(3, kind, info.action_dim, teams=("agent", "adversary", "agent"))
            variants.append(Variant(f"{kind}-teams", config, teams))
    # Groups of different spaces (a speaker and two listeners), padded by the env adapter: a
    # network per group, and (``-across``) one for both groups.
    for kind, dim in (("continuous", 2), ("discrete", 5)):
        grouped = MADDPGConfig(
            hidden_sizes=(16, 16), batch_size=32, tau=0.05, gamma=0.9, max_grad_norm=0.5,
            gumbel_temperature=0.7,
        )  # fmt: skip
        variants.append(Variant(f"{kind}-groups", grouped, env_info(3, kind, dim, groups=True)))
    across = grouped.model_copy(update={"share_across_groups": True})
    speaker = env_info(3, "discrete", 5, groups=True)
    variants.append(Variant("discrete-groups-across", across, speaker))
    # The paper's DDPG baseline: decentralised critics Q_i(o_i, a_i), on one team and on two.
    independent = MADDPGConfig(
        hidden_sizes=(16, 16), batch_size=32, tau=0.05, gamma=0.9, max_grad_norm=0.5,
        gumbel_temperature=0.7, centralised_critic=False,
    )  # fmt: skip
    for kind, dim in (("continuous", 2), ("discrete", 5)):
        variants.append(Variant(f"{kind}-independent", independent, env_info(3, kind, dim)))
        two = env_info(3, kind, dim, teams=("agent", "adversary", "agent"))
        variants.append(Variant(f"{kind}-independent-teams", independent, two))
    return variants


# The authors' central mixer (three hidden layers and a state value V(s)), in the variants whose
# names end with "authors"; the others have the default two layers and no V(s).
AUTHORS_CENTRAL_MIXER = {"central_mixer_layers": 3, "central_mixer_value": True}


def _wqmix_variants() -> list[Variant]:
    """Both weightings, shared and separate agents (the separate ones with the authors' central
    mixer); the targets sync every other update, so ten updates cover several syncs."""
    variants = []
    for weighting, shared in (("ow", True), ("cw", True), ("ow", False), ("cw", False)):
        mixer = {} if shared else AUTHORS_CENTRAL_MIXER
        config = WQMIXConfig(
            weighting=weighting, alpha=0.3, hidden_sizes=(16, 16), mixing_embed_dim=8,
            hypernet_hidden=16, central_mixer_hidden=16, share_parameters=shared,
            target_update_interval=2, batch_size=32, gamma=0.9, **mixer,
        )  # fmt: skip
        name = f"{weighting}-shared" if shared else f"{weighting}-separate-authors"
        variants.append(Variant(name, config, env_info(3, "discrete", 5)))
        if weighting == "ow" and shared:
            groups = env_info(3, "discrete", 5, groups=True)
            variants.append(Variant("ow-groups", config, groups))
            across = config.model_copy(update={"share_across_groups": True})
            variants.append(Variant("ow-groups-across", across, groups))
    return variants + _wqmix_gru_variants()


# The backends whose WQMIX learner has its recurrent variant (a new backend joins here once built).
WQMIX_GRU_BACKENDS = frozenset({Backend.TORCH, Backend.TENSORFLOW, Backend.MINDSPORE})


def _wqmix_gru_variants() -> list[Variant]:
    """GRU agents on padded episodes: OW with shared agents, CW with separate ones."""
    variants = []
    for weighting, shared in (("ow", True), ("cw", False)):
        config = WQMIXConfig(
            weighting=weighting, alpha=0.3, hidden_sizes=(16, 16), mixing_embed_dim=8,
            hypernet_hidden=16, central_mixer_hidden=16, share_parameters=shared,
            target_update_interval=2, gamma=0.9, recurrent=True, rnn_hidden_size=8,
        )  # fmt: skip
        name = f"{weighting}-gru-{'shared' if shared else 'separate'}"
        info = env_info(3, "discrete", 5)
        variants.append(Variant(name, config, info, WQMIX_GRU_BACKENDS))
        if shared:  # a GRU agent network per group
            groups = env_info(3, "discrete", 5, groups=True)
            variants.append(Variant(f"{weighting}-gru-groups", config, groups, WQMIX_GRU_BACKENDS))
    return variants


def _ppo_variants(config_class: type[PPOConfig]) -> list[Variant]:
    """Every combination of action kind, memory and parameter sharing, each making one gradient
    step per update (so Adam's first moment is the gradient), plus two that make several (epochs
    over shuffled minibatches)."""
    variants = []
    for kind, recurrent, shared in itertools.product(
        ("discrete", "continuous"), (False, True), (True, False)
    ):
        name = _ppo_name(kind, recurrent, shared)
        variants.append(_ppo_variant(config_class, name, kind, recurrent, shared, 1, 1))
    variants.append(
        _ppo_variant(config_class, "discrete-gru-minibatches", "discrete", True, True, 2, 3)
    )
    variants.append(
        _ppo_variant(config_class, "continuous-mlp-minibatches", "continuous", False, False, 2, 3)
    )
    # Two teams, one agent between the other's two: shared weights per team, ids within the team.
    teams = ("agent", "adversary", "agent")
    for kind, recurrent in (("discrete", False), ("continuous", True), ("continuous", False)):
        name = f"{kind}-{'gru' if recurrent else 'mlp'}-teams"
        variants.append(_ppo_variant(config_class, name, kind, recurrent, True, 1, 1, teams=teams))
    # Groups of different spaces (a speaker and two listeners), padded by the env adapter: a
    # network per group, and (``-across``) one for both groups.
    for kind in ("discrete", "continuous"):
        variants.append(
            _ppo_variant(config_class, f"{kind}-mlp-groups", kind, False, True, 1, 1, groups=True)
        )
    variants.append(
        _ppo_variant(
            config_class, "discrete-mlp-groups-across", "discrete", False, True, 1, 1,
            groups=True, share_across_groups=True,
        )
    )  # fmt: skip
    if config_class is MAPPOConfig:  # the critic sees the state and then the agent's observation
        for kind, recurrent, shared in (("discrete", False, True), ("continuous", True, False)):
            name = f"{_ppo_name(kind, recurrent, shared)}-agent-specific"
            variants.append(
                _ppo_variant(
                    config_class, name, kind, recurrent, shared, 1, 1,
                    agent_specific_state=True,
                )
            )  # fmt: skip
    return variants


def _ppo_name(kind: str, recurrent: bool, shared: bool) -> str:
    return f"{kind}-{'gru' if recurrent else 'mlp'}-{'shared' if shared else 'separate'}"


def _ppo_variant(
    config_class: type[PPOConfig], name: str, kind: str, recurrent: bool, shared: bool,
    epochs: int, minibatches: int, teams: tuple[str, ...] | None = None, groups: bool = False,
    **extra: Any,
) -> Variant:  # fmt: skip
    config = config_class(
        hidden_sizes=(16, 16), rnn_hidden_size=8, chunk_length=5, recurrent=recurrent,
        share_parameters=shared, rollout_length=ROLLOUT, epochs=epochs, minibatches=minibatches,
        huber_delta=1.0, max_grad_norm=0.5, **extra,
    )  # fmt: skip
    num_agents = 3 if groups else 2 if teams is None else len(teams)
    info = env_info(num_agents, kind, 4 if kind == "discrete" else 2, teams=teams, groups=groups)
    return Variant(name, config, info)


VARIANTS: dict[Algorithm, Callable[[], list[Variant]]] = {
    Algorithm.DDPG: _ddpg_variants,
    Algorithm.MADDPG: _maddpg_variants,
    Algorithm.WQMIX: _wqmix_variants,
    Algorithm.MAPPO: lambda: _ppo_variants(MAPPOConfig),
    Algorithm.IPPO: lambda: _ppo_variants(IPPOConfig),
}


# The compiled backends trace (TensorFlow) or compile (MindSpore, about 10 s a variant on the 2-core
# machine) every learner's graphs, which costs far more than the updates the tests make. So PyTorch,
# the reference, runs every variant (against the NumPy oracle, in milliseconds), and each compiled
# backend runs a subset that takes every choice at least once: each action kind, memory, parameter
# layout (shared, per team, per agent), minibatching, critic (centralised, agent-specific or
# independent), weighting and clipping. The two subsets together hold every variant, so each
# variant is compared with the reference in at least one other backend (test_parity_oracle holds
# the lists to both).
# Each backend's eager and compiled updates are held equal separately (test_parity_compiled,
# test_mindspore_learners).
_PPO_MINDSPORE = frozenset(
    {
        "discrete-gru-shared",
        "continuous-mlp-separate",
        "discrete-gru-minibatches",
        "continuous-mlp-minibatches",
        "continuous-gru-teams",
        "discrete-mlp-teams",
        "discrete-mlp-groups",
        "discrete-mlp-groups-across",
    }
)
_PPO_TENSORFLOW = frozenset(
    {
        "discrete-mlp-shared",
        "discrete-mlp-separate",
        "discrete-gru-separate",
        "continuous-mlp-shared",
        "continuous-gru-shared",
        "continuous-gru-separate",
        "discrete-gru-minibatches",
        "continuous-mlp-teams",
        "continuous-mlp-groups",
        "discrete-mlp-groups-across",
    }
)
SUBSET_VARIANTS: dict[Backend, dict[Algorithm, frozenset[str]]] = {
    Backend.MINDSPORE: {
        Algorithm.DDPG: frozenset({"plain", "clipped"}),
        Algorithm.MADDPG: frozenset(
            {
                "continuous-teams",
                "discrete-separate",
                "continuous-independent",
                "discrete-shared",
                "discrete-groups",
                "discrete-groups-across",
            }
        ),
        Algorithm.WQMIX: frozenset(
            {
                "cw-shared",
                "ow-separate-authors",
                "ow-gru-shared",
                "cw-gru-separate",
                "ow-groups",
                "ow-groups-across",
            }
        ),
        Algorithm.MAPPO: _PPO_MINDSPORE | {"continuous-gru-separate-agent-specific"},
        Algorithm.IPPO: _PPO_MINDSPORE,
    },
    Backend.TENSORFLOW: {
        Algorithm.DDPG: frozenset({"plain", "clipped"}),
        Algorithm.MADDPG: frozenset(
            {
                "continuous-shared",
                "continuous-separate",
                "discrete-teams",
                "discrete-independent",
                "continuous-independent-teams",
                "discrete-independent-teams",
                "continuous-groups",
                "discrete-groups-across",
            }
        ),
        Algorithm.WQMIX: frozenset(
            {
                "ow-shared",
                "cw-separate-authors",
                "ow-gru-shared",
                "cw-gru-separate",
                "ow-groups",
                "ow-groups-across",
                "ow-gru-groups",
            }
        ),  # fmt: skip
        Algorithm.MAPPO: _PPO_TENSORFLOW | {"discrete-mlp-shared-agent-specific"},
        Algorithm.IPPO: _PPO_TENSORFLOW,
    },
}


def variants(algorithm: Algorithm, backend: Backend | None = None) -> list[Variant]:
    """The variants of ``algorithm`` that ``backend`` runs (a compiled backend: its
    ``SUBSET_VARIANTS``); without a backend, those that every backend built for the algorithm
    runs."""
    wanted = entry(algorithm).backends if backend is None else {backend}
    chosen = [v for v in VARIANTS[algorithm]() if v.backends is None or wanted <= v.backends]
    if backend in SUBSET_VARIANTS:
        chosen = [v for v in chosen if v.name in SUBSET_VARIANTS[backend][algorithm]]
    return chosen


# -- data ---------------------------------------------------------------------------------------


def _agent_mask(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """About a quarter zeros, the first row all zeros, never all zeros overall."""
    mask = (rng.uniform(size=shape) > 0.25).astype(np.float32)
    mask[0] = 0.0
    mask[-1] = 1.0
    return mask


def _discrete_actions(rng: np.random.Generator, avail: np.ndarray) -> np.ndarray:
    """Uniform over the available actions (Gumbel-max over log availability)."""
    with np.errstate(divide="ignore"):
        return np.argmax(np.log(avail) + rng.gumbel(size=avail.shape), axis=-1).astype(np.int64)


def _avail(rng: np.random.Generator, shape: tuple[int, ...], info: EnvInfo) -> np.ndarray:
    if info.action_kind != "discrete":
        return np.zeros((*shape, 0), np.float32)
    avail = (rng.uniform(size=(*shape, info.action_dim)) > 0.3).astype(np.float32)
    avail[..., 0] = 1.0
    for j, size in enumerate(info.action_dims):  # a smaller agent's padded actions: never
        avail[..., j, size:] = 0.0
    return avail


def replay_batch(variant: Variant, seed: int, reward_scale: float = 1.0) -> ReplayBatch:
    info, rng = variant.info, np.random.default_rng(seed)
    n, b = info.num_agents, BATCH
    avail = _avail(rng, (b, n), info)
    if info.action_kind == "discrete":
        actions = _discrete_actions(rng, avail)
    else:
        actions = rng.uniform(-1, 1, (b, n, info.action_dim)).astype(np.float32)
    return ReplayBatch(
        obs=rng.normal(size=(b, n, info.obs_dim)).astype(np.float32),
        state=rng.normal(size=(b, info.state_dim)).astype(np.float32),
        actions=actions,
        rewards=(reward_scale * rng.normal(size=(b, n))).astype(np.float32),
        next_obs=rng.normal(size=(b, n, info.obs_dim)).astype(np.float32),
        next_state=rng.normal(size=(b, info.state_dim)).astype(np.float32),
        terminated=np.array([1, 0, 0, 1, 0, 0, 0], np.float32)[:b],
        agent_mask=_agent_mask(rng, (b, n)),
        avail_actions=avail,
        next_avail_actions=_avail(rng, (b, n), info),
    )


def rollout_buffer(
    variant: Variant, seed: int, reward_scale: float = 1.0, chunks: int | None = RECURRENT_CHUNKS
) -> RolloutBuffer:
    """A finished rollout with dead agents, terminations and truncations (with their final
    observations), the observation after it, and (recurrent) the actor's hidden state recorded
    before each step. The learner's value pass fills in the values. A recurrent variant's
    episode boundaries make ``chunks`` chunks (None: as many as the seed's draw makes)."""
    info, rng = variant.info, np.random.default_rng(seed)
    cfg = variant.config
    assert isinstance(cfg, PPOConfig)
    t, e, n = ROLLOUT, info.num_envs, info.num_agents
    buf = RolloutBuffer(info, t, cfg.rnn_hidden_size if cfg.recurrent else None)
    buf.obs[:] = rng.normal(size=buf.obs.shape)
    buf.state[:] = rng.normal(size=buf.state.shape)
    buf.agent_mask[:] = _agent_mask(rng, (t, e, n))
    buf.avail_actions[:] = _avail(rng, (t, e, n), info)
    if info.action_kind == "discrete":
        buf.actions[:] = _discrete_actions(rng, buf.avail_actions)
    else:
        buf.actions[:] = rng.normal(0.0, 0.7, size=buf.actions.shape)
    # Old log-probs far enough from the current policy's that the ratio gets clipped.
    buf.log_prob[:] = rng.normal(-1.5, 0.4, size=(t, e, n))
    buf.rewards[:] = reward_scale * rng.normal(size=(t, e, n))
    for _ in range(1000):  # the episode boundaries; recurrent, redrawn until they make ``chunks``
        buf.terminated[:] = rng.uniform(size=(t, e)) < 0.08
        buf.episode_end[:] = buf.terminated | (rng.uniform(size=(t, e)) < 0.1)
        if not cfg.recurrent or chunks in (None, len(buf.chunks(cfg.chunk_length).env)):
            break
    else:
        raise ValueError(f"no episode boundaries of {e} copies x {t} steps made {chunks} chunks")
    buf.final_obs[:] = rng.normal(size=buf.final_obs.shape)
    buf.final_state[:] = rng.normal(size=buf.final_state.shape)
    if cfg.recurrent:
        buf.actor_hidden[:] = 0.5 * rng.normal(size=buf.actor_hidden.shape)
    buf.step = t
    buf.finish(observation(variant, seed + 1000))
    return buf


def episode_batch(variant: Variant, seed: int, reward_scale: float = 1.0) -> EpisodeBatch:
    """``BATCH`` episodes padded to ``EPISODE_STEPS``: lengths from 1 to the limit, some ending by
    termination and the others by truncation, dead agents, and large random values in every
    padded entry (which a learner that masks its padding never sees)."""
    info, rng = variant.info, np.random.default_rng(seed)
    b, t, n = BATCH, EPISODE_STEPS, info.num_agents
    lengths = np.array([t, 1, 3, t, 5, 2, t])[:b]
    terminated_ends = np.array([0, 1, 1, 0, 0, 1, 1])[:b]
    avail = _avail(rng, (b, t + 1, n), info)
    batch = EpisodeBatch(
        obs=rng.normal(size=(b, t + 1, n, info.obs_dim)).astype(np.float32),
        state=rng.normal(size=(b, t + 1, info.state_dim)).astype(np.float32),
        avail_actions=avail,
        actions=_discrete_actions(rng, avail[:, :-1]),
        rewards=(reward_scale * rng.normal(size=(b, t, n))).astype(np.float32),
        agent_mask=_agent_mask(rng, (b, t, n)),
        terminated=np.zeros((b, t), np.float32),
        filled=(np.arange(t) < lengths[:, None]).astype(np.float32),
    )
    batch.terminated[np.arange(b), lengths - 1] = terminated_ends
    # Padding: steps >= L, and observations after the final one at index L.
    for name in ("obs", "state", "rewards"):
        array = getattr(batch, name)
        limit = lengths + (1 if array.shape[1] == t + 1 else 0)
        padded = np.arange(array.shape[1]) >= limit[:, None]
        array[padded] = 50.0 * rng.normal(size=array[padded].shape)
    batch.terminated[batch.filled == 0] = 1.0
    batch.agent_mask[batch.filled == 0] = 1.0
    return batch


def data(algorithm: Algorithm, variant: Variant, seed: int, reward_scale: float = 1.0) -> Any:
    """The input of update number ``seed``: a replay batch, a batch of episodes (recurrent
    WQMIX) or a finished rollout."""
    if entry(algorithm).runner == RunnerKind.ON_POLICY:
        return rollout_buffer(variant, seed, reward_scale)
    if isinstance(variant.config, WQMIXConfig) and variant.config.recurrent:
        return episode_batch(variant, seed, reward_scale)
    return replay_batch(variant, seed, reward_scale)


def observation(variant: Variant, seed: int) -> Observation:
    info, rng = variant.info, np.random.default_rng(seed)
    e, n = info.num_envs, info.num_agents
    return Observation(
        obs=rng.normal(size=(e, n, info.obs_dim)).astype(np.float32),
        obs_mask=np.ones((e, n, info.obs_dim), np.float32),
        state=rng.normal(size=(e, info.state_dim)).astype(np.float32),
        agent_mask=np.ones((e, n), np.float32),
        avail_actions=_avail(rng, (e, n), info),
    )


# -- driving a learner ----------------------------------------------------------------------------


_BUILT: dict[tuple[Algorithm, Backend, str], tuple[Any, dict[str, Any]]] = {}


def build(algorithm: Algorithm, backend: Backend, variant: Variant) -> Any:
    """``backend``'s learner for ``variant`` in its initial state.

    Learners are built once per session and reset from their initial state on every call: a
    TensorFlow learner traces its compiled update on first use, which costs far more than the
    tests' updates, and ``load_state`` keeps the traced graphs (it assigns the same variables)."""
    key = (algorithm, backend, variant.name)
    if key not in _BUILT:
        cls = entry(algorithm).learner_class(backend)
        learner = cls(variant.config, variant.info, "cpu", 0)
        _BUILT[key] = (learner, learner.state())
    learner, initial = _BUILT[key]
    learner.load_state(initial)
    return learner


def update(algorithm: Algorithm, learner: Any, batch: Any, k: int) -> dict[str, float]:
    """Update number ``k`` (on-policy learners decay their step size first, as the runner does)."""
    if entry(algorithm).runner == RunnerKind.ON_POLICY:
        learner.lr_decay(k * DECAY_STEP, DECAY_TOTAL)
    stats: dict[str, float] = learner.update(batch).as_dict()
    return stats


def parity_pairs() -> list[tuple[Algorithm, Backend]]:
    """Every registered (algorithm, backend) with a reference learner to compare against."""
    return [(a, b) for a, b in built_pairs() if b != REFERENCE and REFERENCE in entry(a).backends]


def parity_params() -> list[Any]:
    import pytest

    return [
        pytest.param(a, b, v, id=f"{a.value}-{b.value}-{v.name}")
        for a, b in parity_pairs()
        for v in variants(a, b)
        if v.backends is None or REFERENCE in v.backends
    ]
