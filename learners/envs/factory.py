"""``make_vec_env``: the batched env a run trains or plays on, from its ``EnvSpec``: in process or
in worker processes, built by the env's suite (``learners.envs.suites``) or stepped on the vector
engine (whose world can live on a torch device)."""

from __future__ import annotations

import functools
import os
from typing import Any

from learners.enums import EnvEngine, EnvSuite
from learners.envs.base import VecEnv
from learners.envs.suites.installed import suite
from learners.spec import EnvSpec

# Subprocess stepping (docs/results/2026-11-22-subprocess-stepping.md has the figures): on an
# idle 2-core machine 8 MPE copies stepped 1.6x faster in 2 worker processes than in process, but
# with the cores busy (the learner, other runs, the API) in process was 1.3x faster, and training
# too. So copies step in worker processes only where cores are to spare: at least
# MIN_CPUS_FOR_SUBPROCESS, one left to the learner, and each worker stepping at least
# SUBPROCESS_MIN_ENVS_PER_WORKER copies.
MIN_CPUS_FOR_SUBPROCESS = 4
SUBPROCESS_MIN_ENVS_PER_WORKER = 4


def default_workers(num_envs: int, cpus: int | None = None) -> int:
    """How many worker processes step ``num_envs`` copies by default (0: in process)."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    if cpus < MIN_CPUS_FOR_SUBPROCESS:
        return 0
    workers = min(cpus - 1, num_envs // SUBPROCESS_MIN_ENVS_PER_WORKER)
    return workers if workers >= 2 else 0


def _steps_on_vector(env_spec: EnvSpec, render: bool) -> bool:
    """Whether the env steps on the vector engine: asked for, and not rendering (replays render
    on mpe2, which the vector engine equals)."""
    return env_spec.engine == EnvEngine.VECTOR and env_spec.suite == EnvSuite.MPE and not render


def _local_factory(env_spec: EnvSpec, seed: int, render: bool, device: str | None) -> Any:
    if _steps_on_vector(env_spec, render):
        from learners.envs.vector.adapter import VectorVecEnv

        return functools.partial(
            VectorVecEnv, env_spec.id, dict(env_spec.kwargs), seed=seed, device=device
        )
    if device is not None:
        raise ValueError("only the vector engine keeps its observations on a device")
    return suite(env_spec.suite).factory(env_spec.id, env_spec.kwargs, seed, render)


def make_vec_env(
    env_spec: EnvSpec,
    seed: int,
    *,
    num_envs: int | None = None,
    render: bool = False,
    workers: int | None = None,
    device: str | None = None,
) -> VecEnv:
    """The batched env ``env_spec`` describes (``num_envs`` overrides the spec's count); episode
    seeds derive from ``seed``. ``workers`` forces stepping in that many processes (0 or 1: in
    process); by default ``default_workers`` decides, and the vector engine, which steps every
    copy at once, steps in process. ``device`` (a torch device, vector engine only) keeps the
    world and the observations there (``learners.training.observation_device`` says when)."""
    count = num_envs if num_envs is not None else env_spec.num_envs
    factory = _local_factory(env_spec, seed, render, device)
    if workers is None:
        workers = 0 if _steps_on_vector(env_spec, render) else default_workers(count)
    if workers <= 1 or render:
        env: VecEnv = factory(count, first_copy=0)
        return env
    from learners.envs.subproc import SubprocVecEnv

    return SubprocVecEnv(factory, count, workers)
