"""What compiling the TensorFlow update with ``tf.function`` buys: time per update, eager against
compiled, beside PyTorch's, on the default configurations and real environment shapes.

    python benchmarks/tensorflow_compile.py
    python benchmarks/tensorflow_compile.py --cases mappo mappo-gru --updates 10
    python benchmarks/tensorflow_compile.py --cases wqmix wqmix-gru --updates 10

For each case it builds the learner in each mode, makes one update (for the compiled mode that is
the one that traces the graph, reported apart as "first"), then times ``--updates`` more and
prints the median. Off-policy learners update on replay batches of the configured size sampled
from random play (recurrent WQMIX: that many whole episodes); on-policy learners on a rollout
they collect themselves (an update is the value pass plus every epoch's minibatch steps). CPU
threads follow ``MARLFORGE_CPU_THREADS`` (default 1) as in a training run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learners.backends import cpu_threads, runtime  # noqa: E402
from learners.buffers.episodes import EpisodeBuffer  # noqa: E402
from learners.buffers.replay import ReplayBuffer  # noqa: E402
from learners.buffers.rollout import RolloutBuffer  # noqa: E402
from learners.enums import Algorithm, Backend  # noqa: E402
from learners.envs.factory import make_vec_env  # noqa: E402
from learners.registry import RunnerKind, entry  # noqa: E402
from learners.runners.off_policy import random_actions, trains_on_episodes  # noqa: E402
from learners.runners.on_policy import collect_rollout  # noqa: E402
from learners.spec import EnvSpec  # noqa: E402

MPE = EnvSpec(suite="mpe", id="simple_spread_v3", num_envs=4, kwargs={})
MPE_CONTINUOUS = EnvSpec(
    suite="mpe", id="simple_spread_v3", num_envs=4, kwargs={"continuous_actions": True}
)
PENDULUM = EnvSpec(suite="gymnasium", id="Pendulum-v1", num_envs=1, kwargs={})

# name -> (algorithm, env, hyperparameters over the env's defaults)
CASES: dict[str, tuple[Algorithm, EnvSpec, dict[str, Any]]] = {
    "ddpg": (Algorithm.DDPG, PENDULUM, {}),
    "maddpg": (Algorithm.MADDPG, MPE_CONTINUOUS, {}),
    "mappo": (Algorithm.MAPPO, MPE, {}),
    "mappo-gru": (Algorithm.MAPPO, MPE, {"recurrent": True}),
    "ippo": (Algorithm.IPPO, MPE, {}),
    "wqmix": (Algorithm.WQMIX, MPE, {}),
    "wqmix-gru": (Algorithm.WQMIX, MPE, {"recurrent": True}),
}


def make_learner(name: str, backend: Backend, compiled: bool) -> tuple[Any, Any, Any]:
    algorithm, env_spec, overrides = CASES[name]
    config_class = entry(algorithm).config
    config = config_class.resolve(env_spec.suite, env_spec.id, overrides)
    env = make_vec_env(env_spec, seed=0)
    learner = entry(algorithm).learner_class(backend)(config, env.info, "cpu", 0)
    if hasattr(learner, "set_compiled"):
        learner.set_compiled(compiled)
    return learner, config, env


def update_input(name: str, learner: Any, config: Any, env: Any) -> Callable[[], Any]:
    """A function that returns fresh input for one update of ``learner``."""
    algorithm = CASES[name][0]
    if entry(algorithm).runner == RunnerKind.ON_POLICY:
        hidden = config.rnn_hidden_size if config.recurrent else None
        buffer = RolloutBuffer(env.info, config.rollout_length, hidden)
        obs, memory = env.reset(), learner.initial_memory(env.info.num_envs)

        def rollout() -> RolloutBuffer:
            buffer.reset()
            collect_rollout(env, learner, buffer, obs, memory)
            return buffer

        return rollout
    replay: ReplayBuffer | EpisodeBuffer
    if trains_on_episodes(config, learner):
        size = config.episode_batch_size
        replay = EpisodeBuffer(env.info, 2 * size)
    else:
        size = config.batch_size
        replay = ReplayBuffer(env.info, 20_000, with_state=learner.uses_state)
    rng = np.random.default_rng(0)
    obs = env.reset()
    steps = 0
    while steps < max(size * 2 // env.info.num_envs, 200) or replay.size < size:
        actions = random_actions(env.info, obs, rng)
        next_obs, transition = env.step(actions)
        replay.add(obs, actions, transition)
        obs = next_obs
        steps += 1
    return lambda: replay.sample(size, rng)


def measure(name: str, backend: Backend, compiled: bool, updates: int) -> tuple[float, float]:
    """Seconds of the first update and the median of the next ``updates``."""
    learner, config, env = make_learner(name, backend, compiled)
    next_input = update_input(name, learner, config, env)
    times = []
    for _ in range(updates + 1):
        data = next_input()
        start = time.perf_counter()
        learner.update(data)
        times.append(time.perf_counter() - start)
    env.close()
    return times[0], statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch column")
    args = parser.parse_args()
    threads = cpu_threads()
    for backend in (Backend.TENSORFLOW, Backend.TORCH):
        module = runtime(backend)
        module.seed(0)
        module.set_threads(threads)
    print(f"median time per update over {args.updates} updates, {threads} CPU thread(s) per op")
    print(f"{'case':>10}  {'tf eager':>10}  {'tf compiled':>12}  {'speed-up':>8}  "
          f"{'first (trace)':>13}  {'torch':>9}")  # fmt: skip
    for name in args.cases:
        _, eager = measure(name, Backend.TENSORFLOW, False, args.updates)
        first, compiled = measure(name, Backend.TENSORFLOW, True, args.updates)
        torch_time = float("nan")
        if not args.no_torch:
            _, torch_time = measure(name, Backend.TORCH, True, args.updates)
        speed_up = eager / compiled
        print(
            f"{name:>10}  {eager * 1e3:8.1f}ms  {compiled * 1e3:10.1f}ms  {speed_up:7.1f}x  "
            f"{first:12.2f}s  {torch_time * 1e3:7.1f}ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
