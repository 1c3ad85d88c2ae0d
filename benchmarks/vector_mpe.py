"""Bare env stepping: the vector MPE engine against mpe2, side by side in one run, one thread.

    python benchmarks/vector_mpe.py --env simple_spread_v3 --vector-envs 8 256 4096 \
        --mpe2-envs 8 64 --rounds 5 --seconds 1 [--jaxmarl-python /tmp/jaxvenv/bin/python]

Both engines step uniformly random actions (drawn before timing; mpe2's action dicts are built
before timing too, which flatters mpe2) and restart ended episodes as they go: the vector engine
with ``reset(mask)``, mpe2 with ``reset()`` per copy. mpe2 steps its copies one after another in a
Python loop, as ``learners.envs.mpe.MPEVecEnv`` does. Threads are pinned to one before NumPy loads.
Env steps are counted over all copies; the table is markdown.

``--torch-devices cpu cuda`` adds the same engine on torch tensors on each device (the world held
there; actions handed over as tensors already on the device, drawn before timing; each figure
waits for the device to finish its last step). On a machine without mpe2, ``--mpe2-envs`` with no
sizes leaves mpe2 out.

``--jaxmarl-python /tmp/jaxvenv/bin/python`` adds JaxMARL's JAX re-implementation of MPE (discrete
actions) to the same rounds: ``benchmarks/jaxmarl_mpe.py`` runs in that interpreter (a scratch
virtualenv with jax and jaxmarl: JAX needs NumPy 2, the project pins NumPy < 2), compiled before
timing, pinned to one CPU and one XLA thread, and timed when its turn in each round comes.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learners.envs.vector import VectorMPE  # noqa: E402

POOL = 64  # distinct random action batches, cycled


class VectorRunner:
    """The vector engine at one size, stepping pre-drawn random actions."""

    def __init__(
        self, env_id: str, kwargs: dict[str, Any], num_envs: int, device: str | None = None
    ) -> None:
        self.engine = engine = VectorMPE(env_id, kwargs, num_envs, seed=0, device=device)
        rng = np.random.default_rng(0)
        shape = (num_envs, engine.num_agents)
        if engine.continuous:
            pool = [rng.random((*shape, 5), dtype=np.float32) for _ in range(POOL)]
        else:
            pool = [rng.integers(0, 5, shape) for _ in range(POOL)]
        self.pool = [engine.xp.asarray(actions) for actions in pool]
        self.device = device
        engine.reset()
        self.steps = 0

    def finish(self) -> None:
        """Wait for the device's queued work (nothing to wait for on the host)."""
        if self.device is not None and self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()

    def step(self) -> None:
        _, _, terminated, truncated = self.engine.step(self.pool[self.steps % POOL])
        ended = terminated | truncated
        if ended.any():
            self.engine.reset(ended)
        self.steps += 1


class Mpe2Runner:
    """``num_envs`` mpe2 parallel envs stepped one after another, as ``MPEVecEnv`` steps them."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], num_envs: int) -> None:
        from learners.envs.mpe import parallel_env

        self.envs = [parallel_env(env_id, kwargs) for _ in range(num_envs)]
        agents = self.envs[0].possible_agents
        spaces = [self.envs[0].action_space(a) for a in agents]
        for i, env in enumerate(self.envs):
            env.reset(seed=i)
        for i, space in enumerate(spaces):
            space.seed(i)
        self.pool = [
            [{a: s.sample() for a, s in zip(agents, spaces, strict=True)} for _ in self.envs]
            for _ in range(POOL)
        ]
        self.steps = 0

    def step(self) -> None:
        actions = self.pool[self.steps % POOL]
        for i, env in enumerate(self.envs):
            env.step(actions[i])
            if not env.agents:
                env.reset()
        self.steps += 1

    def finish(self) -> None:
        """Nothing runs after ``step`` returns."""


class JaxMARLRunner:
    """JaxMARL in its own interpreter (``jaxmarl_mpe.py``), timed on request."""

    def __init__(self, python: str, env_id: str, sizes: list[int]) -> None:
        script = Path(__file__).with_name("jaxmarl_mpe.py")
        command = [python, str(script), "--env", f"MPE_{env_id}", "--envs", *map(str, sizes)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:  # skip the import chatter until it has compiled
            if line.startswith("ready"):
                print(f"JaxMARL: {line.strip()}", file=sys.stderr)
                break
        else:
            raise RuntimeError(f"{' '.join(command)} exited before it was ready")

    def rate(self, num_envs: int, seconds: float) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{num_envs} {seconds}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def rate(runner: VectorRunner | Mpe2Runner, num_envs: int, seconds: float) -> float:
    """Env steps per second over all copies, stepping for about ``seconds``."""
    runner.finish()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or steps < 10:
        runner.step()
        steps += 1
    runner.finish()
    return steps * num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="simple_spread_v3")
    parser.add_argument("--continuous", action="store_true", help="continuous actions")
    parser.add_argument("--vector-envs", type=int, nargs="+", default=[8, 256, 4096])
    parser.add_argument("--mpe2-envs", type=int, nargs="*", default=[8, 64])
    parser.add_argument(
        "--torch-devices", nargs="*", default=[], help="also step on torch tensors there"
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="per configuration and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jaxmarl-python", help="an interpreter with jax and jaxmarl installed")
    args = parser.parse_args()
    if args.jaxmarl_python and args.continuous:
        parser.error("the JaxMARL comparison steps discrete actions")
    kwargs = {"continuous_actions": args.continuous}
    runners: dict[tuple[str, int], VectorRunner | Mpe2Runner] = {
        **{("mpe2", n): Mpe2Runner(args.env, kwargs, n) for n in args.mpe2_envs},
        **{("vector", n): VectorRunner(args.env, kwargs, n) for n in args.vector_envs},
    }
    for device in args.torch_devices:
        for n in args.vector_envs:
            runners[f"torch:{device}", n] = VectorRunner(args.env, kwargs, n, device)
    jaxmarl = None
    if args.jaxmarl_python:
        jaxmarl = JaxMARLRunner(args.jaxmarl_python, args.env, args.vector_envs)
    # Rounds interleave the configurations, so a machine that gets busier slows them all alike.
    rates: dict[tuple[str, int], list[float]] = {key: [] for key in runners}
    rates.update({("jaxmarl", n): [] for n in (args.vector_envs if jaxmarl else [])})
    for _ in range(args.rounds):
        for (engine, n), runner in runners.items():
            rates[engine, n].append(rate(runner, n, args.seconds))
            if jaxmarl is not None and engine == "vector":
                rates["jaxmarl", n].append(jaxmarl.rate(n, args.seconds))
    if jaxmarl is not None:
        jaxmarl.close()
    medians = {key: statistics.median(values) for key, values in rates.items()}
    print_table(args, medians)


def print_table(args: argparse.Namespace, medians: dict[tuple[str, int], float]) -> None:
    """One markdown row per size: mpe2, the vector engine (and its ratio to mpe2: to mpe2's best
    figure at sizes mpe2 did not run), each torch device, JaxMARL."""
    mpe2 = {n: medians["mpe2", n] for n in args.mpe2_envs}
    vector = {n: medians["vector", n] for n in args.vector_envs}
    jax_rates = {n: medians["jaxmarl", n] for n in args.vector_envs if ("jaxmarl", n) in medians}
    best_mpe2 = max(mpe2.values(), default=None)
    kind = "continuous" if args.continuous else "discrete"
    print(f"{args.env}, {kind} actions, one thread, median env-steps/s over all copies of ", end="")
    print(f"{args.rounds} interleaved rounds of {args.seconds:g} s\n")
    head = ["envs", "mpe2", "vector engine", "vector / mpe2"]
    head += [f"torch {d}" for d in args.torch_devices]
    head += [f"torch {d} / vector" for d in args.torch_devices]
    if jax_rates:
        head += ["JaxMARL", "vector / JaxMARL"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for n in sorted(set(mpe2) | set(vector)):
        reference = mpe2.get(n, best_mpe2)
        cells = [f"{n:,}", f"{mpe2[n]:,.0f}" if n in mpe2 else "-"]
        cells.append(f"{vector[n]:,.0f}" if n in vector else "-")
        cells.append(f"{vector[n] / reference:,.0f}x" if n in vector and reference else "-")
        on_torch = [medians.get((f"torch:{d}", n)) for d in args.torch_devices]
        cells += [f"{r:,.0f}" if r else "-" for r in on_torch]
        cells += [f"{r / vector[n]:,.2f}x" if r and n in vector else "-" for r in on_torch]
        if jax_rates:
            jax_rate = jax_rates.get(n)
            cells.append(f"{jax_rate:,.0f}" if jax_rate else "-")
            cells.append(f"{vector[n] / jax_rate:.2f}x" if jax_rate and n in vector else "-")
        print("| " + " | ".join(cells) + " |")
    if best_mpe2:
        print(f"\n(ratios at sizes mpe2 did not run: against its best, {best_mpe2:,.0f}/s)")


if __name__ == "__main__":
    main()
