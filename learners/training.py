"""``train``: the one entry point a host (the Celery worker, a benchmark, a test) calls.

It resolves the device, seeds everything, builds the envs and the learner from the registry, and
hands a ``RunContext`` to the runner of the algorithm's kind; the runner reports through the hooks.
Resuming loads a checkpoint's full state and continues on the same step axis (a spec whose
``init.what`` is ``run`` continues another run's checkpoint the same way); a warm start
(``spec.init``) loads another run's networks into a fresh run (``learners.warm_start``). A
``spec.schedule`` changes hyperparameters between iterations (``reconfigure``); a resumed run's
learner is built with the config its schedule holds at the checkpoint's step.

Seeds: the learner's networks and exploration derive from ``spec.seed``; the runner's generator is
the ``"runner"`` stream; training episodes are seeded from ``(seed, copy, episode)`` and evaluation
episodes from an independent ``"eval"`` seed, the same episodes at every evaluation.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from learners import checkpoint, rng
from learners.backends import prepare_backend, resolve_device
from learners.checkpoint import CheckpointError, Manifest, Tensors
from learners.enums import Backend, EnvEngine, EnvSuite
from learners.envs.base import VecEnv
from learners.envs.factory import make_vec_env
from learners.hooks import TrainingHooks
from learners.registry import RunnerKind, entry
from learners.runners.base import REPORT_PREFIX, RunContext
from learners.spec import ExperimentSpec
from learners.warm_start import warm_start

# Evaluation episodes play on at most this many env copies at once.
MAX_EVAL_ENVS = 16


def _load_resume(path: Path, spec: ExperimentSpec, env: VecEnv) -> tuple[Tensors, Manifest]:
    tensors, manifest = checkpoint.read(path)
    if manifest.algorithm != spec.algorithm:
        raise CheckpointError(f"{path} holds a {manifest.algorithm} run, not {spec.algorithm}")
    if spec.backend not in manifest.resumable_on:
        raise CheckpointError(
            f"{path} can be resumed by {', '.join(manifest.resumable_on)}, not by {spec.backend}"
        )
    if not checkpoint.same_env(manifest.env, env.info):
        raise CheckpointError(f"{path} was taken on a different environment than the spec's")
    if manifest.step > spec.total_steps:
        raise CheckpointError(f"{path} is at step {manifest.step}, past total_steps")
    return tensors, manifest


def _resume(ctx: RunContext, path: Path) -> None:
    """Load the checkpoint at ``path`` into the learner and the runner's generator, and leave the
    tensors and the runner's counters for the runner to take (``RunContext.take_resume``). A
    function of its own so that ``train``'s frame holds no reference to the tensors: the run must
    not keep the checkpoint (a replay buffer's worth) beside the buffer it restores."""
    tensors, manifest = _load_resume(path, ctx.spec, ctx.env)
    ctx.learner.load_state(tensors)
    rng.restore(ctx.rng, tensors["rng/runner"])
    ctx.step, ctx.resumed, ctx.resume = manifest.step, True, (tensors, manifest.runner)
    ctx.report_window = {n: t for n, t in tensors.items() if n.startswith(REPORT_PREFIX)}


# From about this many copies the vector engine steps faster on a GPU than NumPy on one host
# thread: an estimate between the H200's bare-stepping figures (0.19x NumPy's rate at 256 copies,
# 1.77x at 4,096; docs/results/2026-11-26-vector-engine-h200.md), not a measured crossing. Below
# it, a GPU run steps its env on the host and copies the observations over.
DEVICE_ENV_MIN_COPIES = 2048


def observation_device(spec: ExperimentSpec, device: str) -> str | None:
    """Where the training env keeps what the agents observe: on the learner's GPU for an
    on-policy, feed-forward PyTorch run on the vector engine with at least
    ``DEVICE_ENV_MIN_COPIES`` copies, which then steps there and whose rollouts train where they
    were collected (no observation crosses to the host); on the host (``None``) for every other
    run. On a CPU, and on a GPU with fewer copies, NumPy steps the engine faster than torch
    does; the other backends, the off-policy replay buffers and recurrent updates read host
    arrays."""
    if spec.backend != Backend.TORCH or not device.startswith("cuda"):
        return None
    if spec.env.num_envs < DEVICE_ENV_MIN_COPIES:
        return None
    if spec.env.suite != EnvSuite.MPE or spec.env.engine != EnvEngine.VECTOR:
        return None
    if entry(spec.algorithm).runner != RunnerKind.ON_POLICY:
        return None
    return None if getattr(spec.config(), "recurrent", False) else device


def _run_context(
    spec: ExperimentSpec,
    hooks: TrainingHooks,
    env: VecEnv,
    eval_env: VecEnv,
    device: str,
    step: int,
) -> RunContext:
    """The context of a run that starts at env step ``step`` (0, or a resumed checkpoint's), its
    learner built with the config the schedule holds there."""
    algo = entry(spec.algorithm)
    config = spec.config_at(step)
    learner = algo.learner_class(spec.backend)(config, env.info, device, spec.seed)
    return RunContext(
        spec=spec,
        config=config,
        entry=algo,
        env=env,
        eval_env=eval_env,
        learner=learner,
        hooks=hooks,
        device=device,
        rng=rng.generator(spec.seed, "runner"),
    )


def reconfigure(ctx: RunContext, step: int) -> None:
    """Take the schedule's config for env step ``step``: a learner built with it, holding the
    current learner's whole state (``state``/``load_state``, the very round trip a resumed run
    makes through its checkpoint), replaces the current one. Rebuilding rather than setting
    values in place keeps every backend's learner as it is: a learner reads its config only when
    it is built."""
    config = ctx.spec.config_at(step)
    learner = ctx.entry.learner_class(ctx.spec.backend)(
        config, ctx.env.info, ctx.device, ctx.spec.seed
    )
    learner.load_state(ctx.learner.state())
    ctx.learner, ctx.config = learner, config


def train(
    spec: ExperimentSpec,
    hooks: TrainingHooks,
    *,
    resume_from: Path | None = None,
    on_resumed: Callable[[], None] | None = None,
    init_from: Path | None = None,
) -> None:
    """Train ``spec`` to ``spec.total_steps`` (or until ``hooks.should_stop()``), reporting through
    ``hooks``; with ``resume_from``, continue the run that wrote that checkpoint, and call
    ``on_resumed`` once it is loaded (the file is no longer needed: a caller may delete a copy).
    Without it, ``init_from`` is the checkpoint ``spec.init`` names: the run warm-starts from it
    (a resumed run continues its own checkpoint instead)."""
    algo = entry(spec.algorithm)
    if spec.backend not in algo.backends:
        raise ValueError(f"{spec.algorithm} is not built for the {spec.backend} backend")
    device = resolve_device(spec.backend, spec.device)
    prepare_backend(spec.backend, spec.seed)
    runner = importlib.import_module(f"learners.runners.{algo.runner.value}")
    env_device = observation_device(spec, device)
    env = make_vec_env(spec.env, spec.seed, device=env_device)
    eval_env: VecEnv | None = None
    try:
        eval_copies = min(spec.evaluation.episodes, MAX_EVAL_ENVS)
        # Evaluation is occasional: its copies step in process, never in worker processes.
        eval_seed = rng.derive_seed(spec.seed, "eval")
        eval_env = make_vec_env(spec.env, eval_seed, num_envs=eval_copies, workers=0)
        start = 0 if resume_from is None else checkpoint.read_manifest(resume_from).step
        ctx = _run_context(spec, hooks, env, eval_env, device, start)
        ctx.reconfigure = reconfigure
        if resume_from is not None:
            _resume(ctx, Path(resume_from))
            if on_resumed is not None:
                on_resumed()
            hooks.log("info", f"resuming from the checkpoint at step {ctx.step}")
        elif init_from is not None and spec.init is not None:
            parent = warm_start(ctx.learner, Path(init_from), spec, env.info)
            hooks.log(
                "info",
                f"warm start: took the {spec.init.what} of experiment {spec.init.experiment_id}'s "
                f"checkpoint {spec.init.checkpoint_id} (step {parent.step:,}, {parent.backend})",
            )
        hooks.log(
            "info",
            f"training {spec.algorithm} ({spec.backend}, {device}) on {spec.env.suite} "
            f"{spec.env.id} x{spec.env.num_envs} for {spec.total_steps} steps"
            + (f", the env stepping on {env_device}" if env_device else ""),
        )
        runner.run(ctx)
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
