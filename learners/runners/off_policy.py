"""The off-policy loop (DDPG, MADDPG, WQMIX): act, store in a replay buffer, update from samples.

Each iteration steps every env copy once. The first ``learning_starts`` env steps take uniformly
random actions (over the available ones for discrete actions) and make no update; after that the
learner acts with exploration and makes ``updates_per_step`` updates per env step, counted over all
copies (a fractional rate accumulates: 0.25 means one update every 4 env steps).

Resuming restores the replay buffer, the runner's generator, the fractional update count and the
episode index of every copy, then restarts each copy at the episode it was in. At an episode
boundary that is exactly where the run was; mid-episode, the interrupted episodes start over.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from pydantic import JsonValue

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
    """The state of one off-policy run: buffer, counters, the current observation."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.config: OffPolicyConfig = ctx.config  # type: ignore[assignment]
        self.learner: OffPolicyLearner = ctx.learner
        self.buffer = ReplayBuffer(
            ctx.env.info, self.config.buffer_size, with_state=self.learner.uses_state
        )
        self.update_debt = 0.0
        self.updates = 0
        episode_index = None
        if (resume := ctx.runner_resume) is not None:
            tensors, counters = resume
            self.buffer.load_state(tensors)
            self.update_debt = float(counters["update_debt"])
            self.updates = int(counters["updates"])
            episode_index = np.asarray(counters["episode_index"], np.int64)
        self.obs = ctx.env.reset(episode_index=episode_index)

    def state(self) -> RunnerState:
        counters: dict[str, JsonValue] = {
            "kind": "off_policy",
            "episode_index": [int(k) for k in self.ctx.env.episode_index],
            "update_debt": self.update_debt,
            "updates": self.updates,
        }
        return self.buffer.state(), counters

    def iteration(self, loop: Loop) -> None:
        """Step every copy once, store the transitions, then update as many times as owed."""
        ctx, info = self.ctx, self.ctx.env.info
        if ctx.step < self.config.learning_starts:
            actions = random_actions(info, self.obs, ctx.rng)
        else:
            actions = self.learner.act(self.obs, explore=True)
        next_obs, transition = ctx.env.step(actions)
        self.buffer.add(self.obs, actions, transition)
        loop.reporter.episodes(transition)
        self.obs = next_obs
        ctx.step += info.num_envs
        if ctx.step < self.config.learning_starts:
            return
        self.update_debt += info.num_envs * self.config.updates_per_step
        while self.update_debt >= 1.0:
            batch = self.buffer.sample(self.config.batch_size, ctx.rng)
            loop.reporter.stats(self.learner.update(batch).as_dict())
            self.update_debt -= 1.0
            self.updates += 1


def run(ctx: RunContext) -> None:
    """Train until the budget is spent or a stop is asked for; checkpoint at the end either way."""
    runner = OffPolicyRunner(ctx)
    loop = Loop(ctx, runner.state)
    while not loop.tick():
        runner.iteration(loop)
    loop.finish()
