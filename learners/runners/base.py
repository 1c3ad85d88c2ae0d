"""The runner boundary: what ``learners.training.train`` hands a runner, and the chores they share.

``train`` builds a ``RunContext`` (spec, config, envs, learner, hooks, device, the runner's random
generator, the step to start from and, when resuming, the checkpoint's tensors and the runner's
counters) and calls ``learners.runners.<kind>.run(ctx)``. A runner owns its loop and its own state
(a replay buffer, a rollout); after each iteration it calls ``Loop.tick`` which does the periodic
work every runner shares: reporting metrics and progress, evaluating, checkpointing, and honouring
``should_stop``. ``Loop.finish`` does the end-of-run work once.

Reported metrics: ``train/episode_return`` (the mean over agents of each agent's undiscounted
return, averaged over the episodes that ended since the last report), ``train/episode_length``,
``eval/episode_return``, ``eval/episode_length``, ``perf/steps_per_second`` (training steps only:
time spent evaluating and checkpointing is left out) and the learner's stats as ``learner/<name>``.
On an env with more than one team (``EnvInfo.teams``), ``train/episode_return/<team>`` and
``eval/episode_return/<team>`` beside them: the mean over the team's agents of each agent's return,
averaged over the same episodes. A one-team env gets no such series (it would repeat the first).

A checkpoint keeps what the next report would average, noted so far (``report/...`` tensors), so a
resumed run's reports average the same episodes and updates as an uninterrupted run's.

A spec's ``schedule`` is applied by ``Loop.tick`` between iterations: at a change's step, after
that step's evaluation and checkpoint, the context's learner is rebuilt with the new config and
the old one's state (``RunContext.reconfigure``).

Every update's losses (its stats named ``loss`` or ``loss_...``) are checked as they arrive: a NaN
or infinite one ends the run with ``NonFiniteLoss`` at that step, after reporting what was noted
before it, unless the spec turns the guard off (``fail_on_nonfinite_loss``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import JsonValue

from learners import checkpoint, rng
from learners.checkpoint import Manifest, Tensors
from learners.config import AlgorithmConfig
from learners.envs.base import Transition, VecEnv
from learners.envs.teams import team_members, team_returns
from learners.hooks import MetricPoint, TrainingHooks
from learners.learner import EpisodicMemory
from learners.registry import AlgorithmEntry
from learners.spec import ExperimentSpec

# Metrics and progress go out after every this many env steps (and at evaluations and the end).
REPORT_EVERY_STEPS = 1000

REPORT_PREFIX = "report/"
"""A checkpoint's tensors of what the next report averages, noted so far (``Reporter.window``)."""

RunnerState = tuple[Tensors, dict[str, JsonValue]]
"""A runner's own part of a checkpoint: tensors (``replay/...``) and JSON counters."""


@dataclass
class RunContext:
    """Everything a runner needs; built by ``learners.training.train``."""

    spec: ExperimentSpec
    config: AlgorithmConfig
    entry: AlgorithmEntry
    env: VecEnv
    eval_env: VecEnv
    learner: Any
    """The registry's learner for the spec's backend; each runner narrows it to its protocol."""
    hooks: TrainingHooks
    device: str
    rng: np.random.Generator
    """The runner's own random draws (warm-up actions, sampling); saved as ``rng/runner``."""
    step: int = 0
    """Env steps taken so far, over all copies (the run's x axis; a resumed run continues it)."""
    resumed: bool = False
    """Whether the run continues a checkpoint (the one taken at ``step``)."""
    resume: tuple[Tensors, dict[str, Any]] | None = None
    """A resumed run's checkpoint tensors and runner counters, until the runner takes them with
    ``take_resume``; the learner's state and ``rng`` are already loaded from them."""
    report_window: Tensors | None = None
    """A resumed run's checkpoint tensors of its report window (``Reporter.window``)."""
    reconfigure: Callable[[RunContext, int], None] | None = None
    """Replaces ``learner`` and ``config`` with the schedule's for a step, keeping the learner's
    state (``learners.training.reconfigure``); runners read both from the context each time."""

    def take_resume(self) -> tuple[Tensors, dict[str, Any]] | None:
        """The checkpoint's tensors and the runner's counters when resuming, once: the context
        lets go of them, so that a run does not hold its checkpoint (its replay buffer's rows
        included) beside the buffer it loaded them into. Whatever consumes them copies what it
        keeps (the buffers' ``load_state``, the backends' module and optimiser loads)."""
        resume, self.resume = self.resume, None
        return resume


class NonFiniteLoss(ValueError):
    """An update's loss came out NaN or infinite. Every later update would learn from it, so the run
    fails; its message is the run's failure reason, naming the step and each such loss."""

    def __init__(self, step: int, losses: Mapping[str, float]) -> None:
        self.step = step
        self.losses = dict(losses)
        named = ", ".join(f"learner/{name} = {value}" for name, value in self.losses.items())
        super().__init__(f"non-finite loss at step {step}: {named}")

    def __reduce__(self) -> tuple[type[NonFiniteLoss], tuple[int, dict[str, float]]]:
        return type(self), (self.step, self.losses)


def nonfinite_losses(stats: Mapping[str, float]) -> dict[str, float]:
    """The losses among one update's ``stats`` (named ``loss`` or ``loss_...`` in every
    algorithm) whose value is NaN or infinite."""
    return {
        name: float(value)
        for name, value in stats.items()
        if name.startswith("loss") and not math.isfinite(value)
    }


class Every:
    """True once per multiple of ``every`` on the step axis (so a resumed run keeps the grid)."""

    def __init__(self, every: int, step: int) -> None:
        self.every = every
        self.next = (step // every + 1) * every

    def due(self, step: int) -> bool:
        if step < self.next:
            return False
        self.next = (step // self.every + 1) * self.every
        return True


class Episodes:
    """The returns and lengths of the episodes noted, over all agents and, on an env with more than
    one team, per team."""

    def __init__(self, teams: Sequence[str]) -> None:
        members = team_members(teams)
        self._members = members if len(members) > 1 else {}
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.team_returns: dict[str, list[float]] = {name: [] for name in self._members}

    def note(self, transition: Transition, i: int) -> None:
        """Note the episode copy ``i`` ended in ``transition``."""
        self.returns.append(float(transition.episode_returns[i]))
        self.lengths.append(int(transition.episode_lengths[i]))
        for name, value in team_returns(self._members, transition.agent_returns[i]).items():
            self.team_returns[name].append(value)

    def metrics(self, prefix: str) -> dict[str, float]:
        """``<prefix>/episode_return``, ``<prefix>/episode_length`` and
        ``<prefix>/episode_return/<team>``: means over the episodes noted (none if none were)."""
        if not self.returns:
            return {}
        values = {
            f"{prefix}/episode_return": float(np.mean(self.returns)),
            f"{prefix}/episode_length": float(np.mean(self.lengths)),
        }
        for name, returns in self.team_returns.items():
            values[f"{prefix}/episode_return/{name}"] = float(np.mean(returns))
        return values


class Reporter:
    """Batches metric points and sends them with the progress; one ``hooks.metrics`` call per
    report, never one per scalar."""

    def __init__(
        self,
        hooks: TrainingHooks,
        step: int,
        teams: Sequence[str],
        window: Mapping[str, NDArray[Any]] | None = None,
    ) -> None:
        self._hooks = hooks
        self._teams = tuple(teams)
        self._episodes = Episodes(self._teams)
        self._stats: dict[str, list[float]] = {}
        self._pending: list[MetricPoint] = []
        self._since_step = step
        self._since_time = time.perf_counter()
        self._paused = 0.0
        if window:
            self._restore(window)

    def window(self) -> Tensors:
        """What the next report averages, noted so far (the episodes that ended, each update's
        stats), as checkpoint tensors (``report/...``). A run resumed from the checkpoint starts
        its window with them, so its first report averages the same episodes and updates as an
        uninterrupted run's report at that step."""
        episodes = self._episodes
        tensors: Tensors = {
            f"{REPORT_PREFIX}episodes/returns": np.asarray(episodes.returns, np.float64),
            f"{REPORT_PREFIX}episodes/lengths": np.asarray(episodes.lengths, np.int64),
        }
        for team, returns in episodes.team_returns.items():
            tensors[f"{REPORT_PREFIX}episodes/team/{team}"] = np.asarray(returns, np.float64)
        for name, values in self._stats.items():
            tensors[f"{REPORT_PREFIX}stats/{name}"] = np.asarray(values, np.float64)
        return tensors

    def _restore(self, window: Mapping[str, NDArray[Any]]) -> None:
        episodes = self._episodes
        episodes.returns = [float(v) for v in window[f"{REPORT_PREFIX}episodes/returns"]]
        episodes.lengths = [int(v) for v in window[f"{REPORT_PREFIX}episodes/lengths"]]
        for team in episodes.team_returns:
            values = window.get(f"{REPORT_PREFIX}episodes/team/{team}", ())
            episodes.team_returns[team] = [float(v) for v in values]
        stats = f"{REPORT_PREFIX}stats/"
        for name, values in window.items():
            if name.startswith(stats):
                self._stats[name.removeprefix(stats)] = [float(v) for v in values]

    def episodes(self, transition: Transition) -> None:
        """Note the episodes that ended in this step."""
        for i in np.flatnonzero(transition.episode_lengths):
            self._episodes.note(transition, int(i))

    def stats(self, stats: Mapping[str, float]) -> None:
        """Note one update's stats (reported as their mean, in float64)."""
        for name, value in stats.items():
            self._stats.setdefault(name, []).append(float(value))

    def add(self, step: int, values: Mapping[str, float]) -> None:
        """Queue points to send with the next report."""
        now = time.time()
        self._pending.extend(MetricPoint(step, now, name, v) for name, v in values.items())

    def pause(self, seconds: float) -> None:
        """Leave ``seconds`` (evaluation, checkpointing) out of ``perf/steps_per_second``."""
        self._paused += seconds

    def flush(self, step: int) -> None:
        """Send everything noted since the last report, then the progress (nothing when nothing
        happened since the last report)."""
        if step == self._since_step and not (
            self._pending or self._episodes.returns or self._stats
        ):
            return
        values = self._episodes.metrics("train")
        values.update({f"learner/{k}": float(np.mean(v)) for k, v in self._stats.items()})
        elapsed = time.perf_counter() - self._since_time - self._paused
        if step > self._since_step and elapsed > 0:
            values["perf/steps_per_second"] = (step - self._since_step) / elapsed
        self.add(step, values)
        if self._pending:
            self._hooks.metrics(self._pending)
        self._hooks.progress(step)
        self._episodes, self._stats, self._pending = Episodes(self._teams), {}, []
        self._since_step, self._since_time, self._paused = step, time.perf_counter(), 0.0


def evaluate(ctx: RunContext) -> dict[str, float]:
    """Play ``spec.evaluation.episodes`` greedy episodes on the eval env (the same episodes every
    time: copy ``i`` plays its episodes from index 0) and return their mean return and length (and
    each team's mean return, on an env with more than one team)."""
    env, total = ctx.eval_env, ctx.spec.evaluation.episodes
    copies = env.info.num_envs
    quota = np.array([len(range(i, total, copies)) for i in range(copies)])
    played = np.zeros(copies, np.int64)
    episodes = Episodes(env.info.teams)
    obs = env.reset(episode_index=np.zeros(copies, np.int64))
    # A recurrent policy starts every evaluation episode from a fresh state.
    memory = ctx.learner if isinstance(ctx.learner, EpisodicMemory) else None
    if memory is not None:
        memory.end_episodes(np.ones(copies, np.bool_))
    while (played < quota).any():
        obs, transition = env.step(ctx.learner.act(obs, explore=False))
        if memory is not None:
            memory.end_episodes(transition.terminated | transition.truncated)
        for i in np.flatnonzero(transition.episode_lengths):
            if played[i] < quota[i]:
                episodes.note(transition, int(i))
                played[i] += 1
    return episodes.metrics("eval")


def build_manifest(ctx: RunContext, runner: dict[str, JsonValue]) -> Manifest:
    """The manifest of a checkpoint taken now, with the whole config as the spec's hyperparameters
    (a field it lacks then means one older than the file: ``checkpoint.LEGACY_HYPERPARAMETERS``)."""
    spec = ctx.spec.model_dump(mode="json")
    return Manifest(
        algorithm=ctx.spec.algorithm,
        backend=ctx.spec.backend,
        spec={**spec, "hyperparameters": ctx.spec.config().model_dump(mode="json")},
        env=checkpoint.env_info_to_json(ctx.env.info),
        step=ctx.step,
        runner=runner,
        # Every backend saves its whole state under the same canonical names and layout, so any
        # resumes any other's run (the parity suite resumes one backend's training in another).
        resumable_on=sorted(ctx.entry.backends),
        policy_backends=sorted(ctx.entry.backends),
    )


class Loop:
    """The periodic chores of a run, driven by the runner's calls to ``tick`` and ``finish``."""

    def __init__(self, ctx: RunContext, runner_state: Callable[[], RunnerState]) -> None:
        self._ctx = ctx
        self._runner_state = runner_state
        self.reporter = Reporter(ctx.hooks, ctx.step, ctx.env.info.teams, ctx.report_window)
        ctx.report_window = None
        self._report = Every(REPORT_EVERY_STEPS, ctx.step)
        self._eval = Every(ctx.spec.evaluation.every_steps, ctx.step)
        self._checkpoint = Every(ctx.spec.checkpoint.every_steps, ctx.step)
        self._last_eval: int | None = None
        self._last_checkpoint = ctx.step if ctx.resumed else None
        # The schedule's changes still ahead: the learner was built with those at or before the
        # step the run starts from.
        self._changes = sorted({c.at_step for c in ctx.spec.schedule if c.at_step > ctx.step})
        self.stopped = False

    @property
    def done(self) -> bool:
        """The budget is spent."""
        return self._ctx.step >= self._ctx.spec.total_steps

    def stats(self, stats: Mapping[str, float]) -> None:
        """Note one update's stats; a NaN or infinite loss among them raises ``NonFiniteLoss`` at
        the current step (unless ``spec.fail_on_nonfinite_loss`` is off: then it is reported like
        any value, and the host stores what it can of it)."""
        ctx = self._ctx
        if ctx.spec.fail_on_nonfinite_loss and (bad := nonfinite_losses(stats)):
            # What the earlier updates and episodes noted goes out first: the losses on their way
            # up are what a person reads to see why this one blew up.
            self.reporter.flush(ctx.step)
            raise NonFiniteLoss(ctx.step, bad)
        self.reporter.stats(stats)

    def _evaluate(self) -> None:
        start = time.perf_counter()
        self.reporter.add(self._ctx.step, evaluate(self._ctx))
        self._last_eval = self._ctx.step
        self.reporter.pause(time.perf_counter() - start)

    def save_checkpoint(self, window: Tensors | None = None) -> None:
        """Write a checkpoint of the learner, the runner and the report ``window`` (else the
        reporter's now) at the current step."""
        ctx = self._ctx
        if self._last_checkpoint == ctx.step:
            return
        start = time.perf_counter()
        runner_tensors, runner_counters = self._runner_state()
        tensors: dict[str, NDArray[Any]] = {**ctx.learner.state(), **runner_tensors}
        tensors["rng/runner"] = rng.state_tensor(ctx.rng)
        tensors.update(self.reporter.window() if window is None else window)
        manifest = build_manifest(ctx, runner_counters)
        ctx.hooks.checkpoint(ctx.step, lambda path: checkpoint.write(path, tensors, manifest))
        self._last_checkpoint = ctx.step
        self.reporter.pause(time.perf_counter() - start)

    def tick(self) -> bool:
        """The work due at the current step; True when the loop must end (budget spent, or a stop
        was asked for). Runners loop ``while not loop.tick(): <iteration>``, then ``finish()``."""
        step = self._ctx.step
        if self._eval.due(step):
            self._evaluate()
        if self._report.due(step) or self._last_eval == step:
            self.reporter.flush(step)
        if self._checkpoint.due(step):
            self.save_checkpoint()
        if self.done:
            return True
        self._apply_schedule(step)
        if self._ctx.hooks.should_stop():
            self._ctx.hooks.log("info", f"stop requested at step {step}: saving a final checkpoint")
            self.stopped = True
        return self.stopped

    def _apply_schedule(self, step: int) -> None:
        """Take the schedule's change due at ``step``, after this step's evaluation and
        checkpoint: a run continued from that checkpoint (``init.what: run``) builds its
        learner with the new values and the same state, so both train the same from here."""
        if not self._changes or step < self._changes[0]:
            return
        self._changes = [at for at in self._changes if at > step]
        if self._ctx.reconfigure is None:
            raise RuntimeError("the run has a schedule but no way to reconfigure its learner")
        self._ctx.reconfigure(self._ctx, step)
        new = [f"{k}={v}" for c in self._ctx.spec.schedule if c.at_step == step
               for k, v in c.hyperparameters.items()]  # fmt: skip
        self._ctx.hooks.log("info", f"schedule: from step {step:,} the learner trains with "
                            + ", ".join(new))  # fmt: skip

    def finish(self) -> None:
        """The end of a run: a final evaluation (unless it was stopped), report and checkpoint.
        A stopped run reports what it noted, and its checkpoint keeps that window too: resumed,
        its next report averages what an uninterrupted run's would (its one extra point is the
        one at the step it stopped at)."""
        if not self.stopped and self._last_eval != self._ctx.step:
            self._evaluate()
        window = self.reporter.window() if self.stopped else None
        self.reporter.flush(self._ctx.step)
        self.save_checkpoint(window)
