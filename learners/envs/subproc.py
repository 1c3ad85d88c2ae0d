"""A ``VecEnv`` whose copies step in worker processes, each worker running an in-process adapter.

Worker ``w`` owns a contiguous slice of the copies and builds them with ``first_copy`` set to the
slice's start, so copy ``i`` plays exactly the episodes it would play in process: the two kinds give
the same numbers (a test holds them to it). Whether this is faster depends on the env's step cost
against the pickling and pipe round trip; ``docs/results/2026-11-22-subprocess-stepping.md`` has
the figures that decide when ``make_vec_env`` uses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import Observation, Transition, VecEnv
from learners.envs.batch import StepBuffers, as_index_array


class EnvFactory(Protocol):
    """Builds ``num_envs`` in-process copies starting at run copy ``first_copy`` (picklable)."""

    def __call__(self, num_envs: int, *, first_copy: int) -> VecEnv: ...


_OBS_FIELDS = ("obs", "state", "agent_mask", "avail_actions")
_TRANSITION_FIELDS = (
    "rewards", "terminated", "truncated", "final_obs", "final_state",
    "final_avail_actions", "episode_returns", "episode_lengths", "agent_returns",
)  # fmt: skip


def _worker(conn: Connection, factory: EnvFactory, num_envs: int, first_copy: int) -> None:
    env = factory(num_envs, first_copy=first_copy)
    handlers: dict[str, Callable[..., Any]] = {
        "reset": lambda seed, index: _pack_obs(env.reset(seed, index)),
        "step": lambda actions: _pack_step(*env.step(actions), env.episode_index),
        "render": env.render,
    }
    try:
        while True:
            command, args = conn.recv()
            if command == "close":
                break
            conn.send(handlers[command](*args))
    finally:
        env.close()
        conn.close()


def _pack_obs(obs: Observation) -> tuple[NDArray[Any], ...]:
    return tuple(getattr(obs, name) for name in _OBS_FIELDS)


def _pack_step(obs: Observation, tr: Transition, index: NDArray[np.int64]) -> tuple[Any, ...]:
    return _pack_obs(obs), tuple(getattr(tr, name) for name in _TRANSITION_FIELDS), index


class SubprocVecEnv:
    """``num_envs`` copies spread over ``num_workers`` processes (spawned, not forked: the parent
    may hold threads of a deep-learning framework)."""

    def __init__(self, factory: EnvFactory, num_envs: int, num_workers: int) -> None:
        num_workers = max(1, min(num_workers, num_envs))
        bounds = np.linspace(0, num_envs, num_workers + 1).astype(int)
        self._slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs = []
        for part in self._slices:
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker, args=(child, factory, part.stop - part.start, part.start)
            )
            proc.daemon = True
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        # The parent learns the spaces from a cheap local copy instead of another round trip.
        probe = factory(1, first_copy=0)
        probe_info = probe.info
        probe.close()
        self.info = dataclasses.replace(probe_info, num_envs=num_envs)
        self._buffers = StepBuffers(self.info)
        self.episode_index = np.zeros(num_envs, np.int64)

    def _call(self, command: str, per_worker_args: list[tuple[Any, ...]]) -> list[Any]:
        for conn, args in zip(self._conns, per_worker_args, strict=True):
            conn.send((command, args))
        return [conn.recv() for conn in self._conns]

    def reset(
        self, seed: int | None = None, episode_index: NDArray[np.int64] | None = None
    ) -> Observation:
        self.episode_index = as_index_array(episode_index, self.info.num_envs)
        args = [(seed, self.episode_index[part]) for part in self._slices]
        obs = self._buffers.start_reset()
        for part, arrays in zip(self._slices, self._call("reset", args), strict=True):
            for name, value in zip(_OBS_FIELDS, arrays, strict=True):
                getattr(obs, name)[part] = value
        return obs

    def step(self, actions: NDArray[np.generic]) -> tuple[Observation, Transition]:
        replies = self._call("step", [(actions[part],) for part in self._slices])
        obs, transition = self._buffers.start_step()
        for part, (obs_arrays, tr_arrays, index) in zip(self._slices, replies, strict=True):
            for name, value in zip(_OBS_FIELDS, obs_arrays, strict=True):
                getattr(obs, name)[part] = value
            for name, value in zip(_TRANSITION_FIELDS, tr_arrays, strict=True):
                getattr(transition, name)[part] = value
            self.episode_index[part] = index
        return obs, transition

    def render(self) -> NDArray[np.uint8]:
        self._conns[0].send(("render", ()))
        frame: NDArray[np.uint8] = self._conns[0].recv()
        return frame

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(BrokenPipeError, OSError):  # the worker may be gone
                conn.send(("close", ()))
            conn.close()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
