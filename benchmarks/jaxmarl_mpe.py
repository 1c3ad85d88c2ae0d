"""JaxMARL's MPE stepping, timed for ``benchmarks/vector_mpe.py --jaxmarl-python``.

Runs in a scratch virtualenv of its own, never in the project's (JAX needs NumPy 2, MindSpore pins
NumPy < 2), made with:

    python3.11 -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install jax jaxmarl

and is driven by ``vector_mpe.py`` over stdin/stdout so that the two engines' rounds interleave in
one run: it builds and compiles every size first (the compile is not timed), prints ``ready``, then
answers each line ``<num_envs> <seconds>`` with the env-steps/s over all copies it measured.

It steps JaxMARL the way a JAX training loop does: ``jit`` of a ``lax.scan`` over ``SCAN`` steps
of the ``vmap``-ed ``env.step`` (which resets ended episodes itself), with uniformly random
actions drawn before timing and passed in, as ``vector_mpe.py`` draws ours. Pinned to one CPU
and one XLA thread, as the vector engine runs on one thread.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)
os.environ["JAX_PLATFORMS"] = "cpu"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxmarl  # noqa: E402

SCAN = 25  # steps per compiled call: one simple_spread episode
POOL = 8  # distinct pre-drawn action sequences, cycled


class Runner:
    """``num_envs`` JaxMARL copies, advanced ``SCAN`` steps per compiled call."""

    def __init__(self, env_name: str, num_envs: int) -> None:
        self.env = env = jaxmarl.make(env_name)
        self.num_envs = num_envs
        agents = env.agents
        key = jax.random.PRNGKey(0)
        key, reset_key = jax.random.split(key)
        _, self.state = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))
        self.pool = []
        for _ in range(POOL):
            key, *keys = jax.random.split(key, len(agents) + 1)
            self.pool.append(
                {
                    a: jax.random.randint(k, (SCAN, num_envs), 0, env.action_space(a).n)
                    for a, k in zip(agents, keys, strict=True)
                }
            )
        self.key = key
        step = jax.vmap(env.step)

        def scan(state: Any, key: Any, actions: dict[str, Any]) -> Any:
            def body(carry: Any, xs: Any) -> Any:
                state, key = carry
                key, step_key = jax.random.split(key)
                _, state, reward, _, _ = step(jax.random.split(step_key, num_envs), state, xs)
                return (state, key), reward[agents[0]].sum()

            (state, key), rewards = jax.lax.scan(body, (state, key), actions)
            return state, key, rewards.sum()

        self.scan = jax.jit(scan)
        self.calls = 0
        self.advance()  # compiles

    def advance(self) -> None:
        actions = self.pool[self.calls % POOL]
        self.state, self.key, total = self.scan(self.state, self.key, actions)
        jax.block_until_ready(total)
        self.calls += 1

    def rate(self, seconds: float) -> float:
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds or calls < 3:
            self.advance()
            calls += 1
        return calls * SCAN * self.num_envs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MPE_simple_spread_v3")
    parser.add_argument("--envs", type=int, nargs="+", required=True)
    parser.add_argument("--cpu", type=int, default=0, help="the one CPU to run on")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    runners = {n: Runner(args.env, n) for n in args.envs}
    print("ready", jax.__version__, jnp.zeros(1).devices(), flush=True)
    for line in sys.stdin:
        num_envs, seconds = line.split()
        print(f"{runners[int(num_envs)].rate(float(seconds)):.1f}", flush=True)


if __name__ == "__main__":
    main()
