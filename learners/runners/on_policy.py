"""The on-policy loop (MAPPO, IPPO): collect a rollout with the current policy, update, repeat.

Each iteration steps every env copy ``rollout_length`` times (fewer for the last one, so the run
stops at its budget), acting for all copies and agents in one batched forward pass of the actor
per step; where an episode ends, a recurrent policy's GRU state is reset for that copy. The buffer
keeps each ended episode's final observation (a truncated episode bootstraps from its value, a
terminated one does not) and the observation after the last step. Then the step size follows the
linear schedule and the learner updates: it values the whole rollout in one batched pass of the
critic (off the acting path) and trains.

With the env's observations on the learner's device (the vector engine on a torch GPU:
``learners.training.observation_device``), the buffer keeps them there and the update trains on
them where they are; no observation is copied to the host.

Checkpoints fall between rollouts, so a runner's own state is only each copy's episode index:
resuming restarts every copy at the start of the episode it was in (exactly where it was when
rollouts end on episode boundaries, as they do on MPE with the default rollout length), with
fresh GRU states.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from pydantic import JsonValue

from learners.algorithms.ppo import PPOConfig
from learners.buffers.rollout import RolloutBuffer, RolloutStep
from learners.envs.base import Observation, Transition, VecEnv, observation_ops
from learners.learner import Learner
from learners.runners.base import Loop, RunContext, RunnerState
from learners.runners.off_policy import UpdateStats


class OnPolicyLearner(Learner, Protocol):
    """A learner the on-policy runner can train. ``Memory`` is opaque to the runner: the
    recurrent state of the training copies (None for feed-forward policies)."""

    def initial_memory(self, num_envs: int) -> Any:
        """The memory of ``num_envs`` copies at the start of their episodes (called when the
        training copies start afresh: at the start of a run and on resume)."""
        ...

    def reset_memory(self, memory: Any, ended: NDArray[np.bool_]) -> Any:
        """``memory`` with the copies whose episode ended back at the start."""
        ...

    def rollout_step(self, observation: Observation, memory: Any) -> tuple[RolloutStep, Any]:
        """Sample actions for every copy and agent; returns the step and the memory after it."""
        ...

    def lr_decay(self, step: int, total_steps: int) -> float:
        """Set the step size for env step ``step`` of ``total_steps``."""
        ...

    def update(self, buffer: RolloutBuffer) -> UpdateStats:
        """Value the finished rollout in ``buffer`` and train on it."""
        ...


class OnPolicyRunner:
    """The state of one on-policy run: the rollout buffer, the current observation and memory."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        # The runner reads only what a schedule cannot change (``AlgorithmConfig.mutable_fields``).
        self.config: PPOConfig = ctx.config  # type: ignore[assignment]
        self.hidden_size = self.config.rnn_hidden_size if self.config.recurrent else None
        self.buffer = self._new_buffer(self.config.rollout_length)
        episode_index = None
        if (resume := ctx.take_resume()) is not None:
            episode_index = np.asarray(resume[1]["episode_index"], np.int64)
        self.obs = ctx.env.reset(episode_index=episode_index)
        self.memory = self.learner.initial_memory(ctx.env.info.num_envs)

    @property
    def learner(self) -> OnPolicyLearner:
        """The context's learner (a schedule's change replaces it, ``RunContext.reconfigure``)."""
        learner: OnPolicyLearner = self.ctx.learner
        return learner

    def state(self) -> RunnerState:
        counters: dict[str, JsonValue] = {
            "kind": "on_policy",
            "episode_index": [int(k) for k in self.ctx.env.episode_index],
        }
        return {}, counters

    def _rollout_buffer(self) -> RolloutBuffer:
        """The buffer for the next rollout: a shorter one when the budget ends sooner."""
        num_envs = self.ctx.env.info.num_envs
        steps_left = math.ceil((self.ctx.spec.total_steps - self.ctx.step) / num_envs)
        if steps_left >= self.config.rollout_length:
            self.buffer.reset()
            return self.buffer
        return self._new_buffer(steps_left)

    def _new_buffer(self, length: int) -> RolloutBuffer:
        """A buffer of ``length`` steps that keeps the observations where the env does."""
        env = self.ctx.env
        return RolloutBuffer(env.info, length, self.hidden_size, observation_ops(env))

    def iteration(self, loop: Loop) -> None:
        """One rollout, then one update on it."""
        buffer = self._rollout_buffer()
        self.obs, self.memory = collect_rollout(
            self.ctx.env, self.learner, buffer, self.obs, self.memory, loop.reporter.episodes
        )
        self.ctx.step += buffer.length * self.ctx.env.info.num_envs
        self.learner.lr_decay(self.ctx.step, self.ctx.spec.total_steps)
        loop.stats(self.learner.update(buffer).as_dict())


def collect_rollout(
    env: VecEnv,
    learner: OnPolicyLearner,
    buffer: RolloutBuffer,
    obs: Observation,
    memory: Any,
    on_transition: Callable[[Transition], None] | None = None,
) -> tuple[Observation, Any]:
    """Fill ``buffer`` with ``buffer.length`` steps of every copy, starting from ``obs`` and
    ``memory``; returns the observation and memory to continue from."""
    for _ in range(buffer.length):
        step, memory = learner.rollout_step(obs, memory)
        buffer.add(obs, step)
        obs, transition = env.step(step.env_actions)
        buffer.add_outcome(transition)
        ended = transition.terminated | transition.truncated
        if ended.any():
            memory = learner.reset_memory(memory, ended)
        if on_transition is not None:
            on_transition(transition)
    buffer.finish(obs)
    return obs, memory


def run(ctx: RunContext) -> None:
    """Train until the budget is spent or a stop is asked for; checkpoint at the end either way."""
    runner = OnPolicyRunner(ctx)
    loop = Loop(ctx, runner.state)
    while not loop.tick():
        runner.iteration(loop)
    loop.finish()
