"""The off-policy loop (DDPG, MADDPG, WQMIX): act, store in a replay buffer, update from samples.

Each iteration steps every env copy once. The first ``learning_starts`` env steps take uniformly
random actions (over the available ones for discrete actions) and make no update; after that the
learner acts with exploration and makes ``updates_per_step`` updates per env step, counted over all
copies (a fractional rate accumulates: 0.25 means one update every 4 env steps).

Recurrent agents (a config with ``recurrent`` on, ``EpisodicConfig``) change two things and keep
the loop: the buffer holds whole episodes (``learners.buffers.episodes``), sampled
``episode_batch_size`` at a time, and updates are owed only once it holds that many; and acting
carries the agents' hidden state per copy (opaque to the runner, the learner's
``initial_memory``/``reset_memory``/``explore_step``), set back to zero where an episode ends.

Resuming restores the replay buffer, the runner's generator, the fractional update count and the
episode index of every copy, then restarts each copy at the episode it was in (with a zero hidden
state). At an episode boundary that is exactly where the run was; mid-episode, the interrupted
episodes start over.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from pydantic import JsonValue

from learners.buffers.episodes import EpisodeBatch, EpisodeBuffer
from learners.buffers.replay import ReplayBatch, ReplayBuffer
from learners.envs.base import EnvInfo, Observation
from learners.learner import Learner
from learners.runners.base import Loop, RunContext, RunnerState


class UpdateStats(Protocol):
    """A learner's typed stats of one update."""

    def as_dict(self) -> dict[str, float]:
        """The stats by name (reported as ``learner/<name>``)."""
        ...


class OffPolicyLearner(Learner, Protocol):
    """A learner the off-policy runner can train."""

    uses_state: bool
    """Whether ``update`` reads the global state (the buffer stores it only then)."""

    def update(self, batch: ReplayBatch) -> UpdateStats:
        """One gradient step on ``batch``."""
        ...


class OffPolicyConfig(Protocol):
    """The config fields the off-policy runner reads (every off-policy algorithm has them)."""

    @property
    def batch_size(self) -> int: ...
    @property
    def buffer_size(self) -> int: ...
    @property
    def learning_starts(self) -> int: ...
    @property
    def updates_per_step(self) -> float: ...


@runtime_checkable
class EpisodicConfig(Protocol):
    """The fields of a config whose agents can be recurrent (WQMIX's): with ``recurrent`` on, the
    runner stores whole episodes and trains on ``episode_batch_size`` of them at a time."""

    @property
    def recurrent(self) -> bool: ...
    @property
    def episode_batch_size(self) -> int: ...
    @property
    def episode_buffer_size(self) -> int: ...


@runtime_checkable
class RecurrentOffPolicyLearner(Protocol):
    """An off-policy learner with recurrent agents. ``Memory`` is opaque to the runner: the
    agents' hidden state for the training copies (the names are the on-policy learners')."""

    def initial_memory(self, num_envs: int) -> Any:
        """The memory of ``num_envs`` copies at the start of their episodes."""
        ...

    def reset_memory(self, memory: Any, ended: NDArray[np.bool_]) -> Any:
        """``memory`` with the copies whose episode ended back at the start."""
        ...

    def explore_step(self, observation: Observation, memory: Any) -> tuple[NDArray[Any], Any]:
        """Exploring actions for every copy and agent from ``memory``; returns them and the
        memory after the step."""
        ...

    def update(self, batch: EpisodeBatch) -> UpdateStats:
        """One gradient step on a batch of whole episodes."""
        ...


def trains_on_episodes(config: object, learner: object) -> bool:
    """Whether the run stores whole episodes: ``config`` asks for recurrent agents. Refuses a
    learner that has no recurrent variant rather than training it on transitions."""
    if not (isinstance(config, EpisodicConfig) and config.recurrent):
        return False
    if not isinstance(learner, RecurrentOffPolicyLearner):
        raise ValueError(f"{type(learner).__name__} has no recurrent variant (recurrent: true)")
    return True


def random_actions(info: EnvInfo, obs: Observation, rng: np.random.Generator) -> NDArray[Any]:
    """Uniform actions: in [-1, 1] if continuous, over the available actions if discrete."""
    shape = (info.num_envs, info.num_agents)
    if info.action_kind == "continuous":
        return rng.uniform(-1.0, 1.0, (*shape, info.action_dim)).astype(np.float32)
    # Gumbel-max over log(avail): unavailable actions get -inf and are never drawn.
    with np.errstate(divide="ignore"):
        scores = np.log(obs.avail_actions) + rng.gumbel(size=obs.avail_actions.shape)
    actions: NDArray[np.int64] = np.argmax(scores, axis=-1).astype(np.int64)
    return actions


class OffPolicyRunner:
    """The state of one off-policy run: buffer, counters, the current observation and (recurrent
    agents) the hidden state of the training copies."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        # The runner reads only what a schedule cannot change (``AlgorithmConfig.mutable_fields``).
        self.config: OffPolicyConfig = ctx.config  # type: ignore[assignment]
        info = ctx.env.info
        self.buffer: ReplayBuffer | EpisodeBuffer
        self.episodic = trains_on_episodes(ctx.config, ctx.learner)
        if self.episodic:
            episodic: EpisodicConfig = ctx.config  # type: ignore[assignment]
            self.buffer = EpisodeBuffer(info, episodic.episode_buffer_size)
            self.batch_size = episodic.episode_batch_size
        else:
            self.buffer = ReplayBuffer(
                info, self.config.buffer_size, with_state=ctx.learner.uses_state
            )
            self.batch_size = self.config.batch_size
        self.memory: Any = None
        if self.recurrent is not None:
            self.memory = self.recurrent.initial_memory(info.num_envs)
        self.update_debt = 0.0
        self.updates = 0
        episode_index = None
        if (resume := ctx.take_resume()) is not None:
            tensors, counters = resume
            self.buffer.load_state(tensors)
            self.update_debt = float(counters["update_debt"])
            self.updates = int(counters["updates"])
            episode_index = np.asarray(counters["episode_index"], np.int64)
        self.obs = ctx.env.reset(episode_index=episode_index)

    @property
    def learner(self) -> OffPolicyLearner:
        """The context's learner (a schedule's change replaces it, ``RunContext.reconfigure``)."""
        learner: OffPolicyLearner = self.ctx.learner
        return learner

    @property
    def recurrent(self) -> RecurrentOffPolicyLearner | None:
        """The learner, when it trains recurrent agents on whole episodes; else None."""
        learner: RecurrentOffPolicyLearner = self.ctx.learner
        return learner if self.episodic else None

    def state(self) -> RunnerState:
        counters: dict[str, JsonValue] = {
            "kind": "off_policy",
            "episode_index": [int(k) for k in self.ctx.env.episode_index],
            "update_debt": self.update_debt,
            "updates": self.updates,
        }
        return self.buffer.state(), counters

    def _act(self) -> NDArray[Any]:
        """Random actions while warming up (the hidden state stays zero), then the learner's
        exploring policy (recurrent: from the copies' hidden state, which it advances)."""
        ctx = self.ctx
        if ctx.step < self.config.learning_starts:
            return random_actions(ctx.env.info, self.obs, ctx.rng)
        if self.recurrent is None:
            return self.learner.act(self.obs, explore=True)
        actions, self.memory = self.recurrent.explore_step(self.obs, self.memory)
        return actions

    def _ready(self) -> bool:
        """Whether updates are owed yet: after ``learning_starts``, and for whole episodes once
        the buffer holds a batch of them."""
        if self.ctx.step < self.config.learning_starts:
            return False
        return self.recurrent is None or self.buffer.size >= self.batch_size

    def iteration(self, loop: Loop) -> None:
        """Step every copy once, store the transitions, then update as many times as owed."""
        ctx, info = self.ctx, self.ctx.env.info
        actions = self._act()
        next_obs, transition = ctx.env.step(actions)
        self.buffer.add(self.obs, actions, transition)
        if self.recurrent is not None:
            ended = transition.terminated | transition.truncated
            self.memory = self.recurrent.reset_memory(self.memory, ended)
        loop.reporter.episodes(transition)
        self.obs = next_obs
        ctx.step += info.num_envs
        if not self._ready():
            return
        self.update_debt += info.num_envs * self.config.updates_per_step
        while self.update_debt >= 1.0:
            loop.stats(self._update().as_dict())
            self.update_debt -= 1.0
            self.updates += 1

    def _update(self) -> UpdateStats:
        """One update on a fresh sample (transitions, or whole episodes for recurrent agents)."""
        if isinstance(self.buffer, EpisodeBuffer):
            assert self.recurrent is not None
            return self.recurrent.update(self.buffer.sample(self.batch_size, self.ctx.rng))
        return self.learner.update(self.buffer.sample(self.batch_size, self.ctx.rng))


def run(ctx: RunContext) -> None:
    """Train until the budget is spent or a stop is asked for; checkpoint at the end either way."""
    runner = OffPolicyRunner(ctx)
    loop = Loop(ctx, runner.state)
    while not loop.tick():
        runner.iteration(loop)
    loop.finish()
