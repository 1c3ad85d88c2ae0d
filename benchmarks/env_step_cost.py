"""What one env step costs in each environment suite, beside mpe2's simple_spread, in one run.

    python benchmarks/env_step_cost.py --envs 8 --rounds 5 --seconds 1 \
        [mpe:simple_spread_v3 sisl:pursuit_v4 lbf:Foraging-8x8-2p-2f-coop-v3 ...]

Each ``suite:env_id`` is built the way a worker builds it, through its suite's factory
(``learners.envs.catalogue.suite(name).factory(env_id, {}, seed, False)(--envs, first_copy=0)``),
with the id's default arguments, so the figures include MARLForge's adapter (padding, masks, the
[-1, 1] action mapping, automatic resets) and not only the env's own code. ``mpe:simple_spread_v3``
is mpe2 on ``MPEVecEnv`` (the suite's factory, not the vector engine: ``benchmarks/vector_mpe.py``
times that), and it is the reference every ratio is taken against (``--reference``).

Actions are uniformly random and drawn before timing (a pool of 64 batches, cycled): discrete ones
below each agent's own action count (``EnvInfo.action_dims``), continuous ones in [-1, 1]. Ended
episodes restart as they do in training (the adapter resets them inside ``step``), so an env whose
random episodes end early (multiwalker's walkers fall) pays for its resets in its figure; the table
shows the mean episode length seen while timing. Every env steps ``--warmup`` seconds before its
first round. Rounds are interleaved (every env once per round, round-robin), so a machine that gets
busier slows them all alike; each figure is the median over ``--rounds``, and the table gives the
lowest and highest cost ratio to the reference within one round (the noise a ratio carries).
Threads are pinned to one before NumPy loads. Env steps count every copy: a batched step of
``--envs`` copies is ``--envs`` env steps; an agent step is one agent's share of an env step (µs
per env step / agents).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learners.envs.catalogue import suite  # noqa: E402

POOL = 64  # distinct random action batches, cycled
DEFAULT_ENVS = (
    "mpe:simple_spread_v3",
    "mpe:simple_speaker_listener_v4",
    "mpe:simple_world_comm_v3",
    "sisl:pursuit_v4",
    "sisl:waterworld_v4",
    "sisl:multiwalker_v9",
    "mamujoco:HalfCheetah-2x3",
    "mamujoco:Ant-2x4",
    "lbf:Foraging-8x8-2p-2f-coop-v3",
    "lbf:Foraging-15x15-4p-3f-v3",
    "rware:rware-tiny-2ag-v2",
    "rware:rware-small-4ag-v2",
    "gridcoop:signal_v0",
)


class Runner:
    """``num_envs`` copies of one env from its suite's factory, stepping pre-drawn random
    actions."""

    def __init__(self, name: str, num_envs: int, seed: int) -> None:
        suite_name, _, env_id = name.partition(":")
        if not env_id:
            raise SystemExit(f"{name!r}: give suite:env_id")
        self.name, self.num_envs = name, num_envs
        self.env = suite(suite_name).factory(env_id, {}, seed, False)(num_envs, first_copy=0)
        info = self.env.info
        self.agents, self.kind = info.num_agents, info.action_kind
        rng = np.random.default_rng(seed)
        if info.action_kind == "continuous":
            shape = (num_envs, info.num_agents, info.action_dim)
            self.pool = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(POOL)]
        else:
            sizes = np.asarray(info.action_dims or (info.action_dim,) * info.num_agents)
            self.pool = [rng.integers(0, sizes, (num_envs, info.num_agents)) for _ in range(POOL)]
        self.env.reset()
        self.steps = 0
        self.episodes = 0
        self.episode_steps = 0

    def step(self) -> None:
        _, transition = self.env.step(self.pool[self.steps % POOL])
        lengths = transition.episode_lengths
        ended = lengths > 0
        if ended.any():
            self.episodes += int(ended.sum())
            self.episode_steps += int(lengths[ended].sum())
        self.steps += 1

    def rate(self, seconds: float) -> float:
        """Env steps per second over all copies, stepping for about ``seconds``."""
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or steps < 10:
            self.step()
            steps += 1
        return steps * self.num_envs / (time.perf_counter() - start)

    def mean_episode(self) -> float | None:
        return self.episode_steps / self.episodes if self.episodes else None

    def close(self) -> None:
        self.env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("envs_to_time", nargs="*", metavar="suite:env_id", default=DEFAULT_ENVS)
    parser.add_argument("--envs", type=int, default=8, help="copies per batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per env and round")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds per env before timing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reference", default="mpe:simple_spread_v3", help="the env the ratios divide by"
    )
    args = parser.parse_args()
    names = list(dict.fromkeys(args.envs_to_time))
    if args.reference not in names:
        names.insert(0, args.reference)
    runners: dict[str, Runner] = {}
    for name in names:
        started = time.perf_counter()
        runners[name] = runner = Runner(name, args.envs, args.seed)
        built = time.perf_counter() - started
        runner.rate(args.warmup)
        print(f"{name}: built in {built:.2f} s, warmed up", file=sys.stderr)
    for runner in runners.values():  # count episodes over the timed steps only
        runner.episodes = runner.episode_steps = 0
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for round_ in range(args.rounds):
        for name, runner in runners.items():
            rates[name].append(runner.rate(args.seconds))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    for runner in runners.values():
        runner.close()
    print_table(args, runners, {name: statistics.median(r) for name, r in rates.items()}, rates)


def print_table(
    args: argparse.Namespace,
    runners: dict[str, Runner],
    medians: dict[str, float],
    rates: dict[str, list[float]],
) -> None:
    """One markdown row per env: its rate and cost per env step and per agent step, each beside
    the reference's."""
    reference = runners[args.reference]
    ref_us = 1e6 / medians[args.reference]
    ref_agent_us = ref_us / reference.agents
    print(f"{args.envs} copies per batch, one thread, random actions, median of ", end="")
    print(f"{args.rounds} interleaved rounds of {args.seconds:g} s; ratios against ", end="")
    print(f"{args.reference} (cost per step: >1x is dearer)\n")
    head = [
        "suite:env_id",
        "agents",
        "actions",
        "env steps/s",
        "µs / env step",
        "× ref (env step)",
        "rounds' range",
        "µs / agent step",
        "× ref (agent step)",
        "spread",
        "mean episode",
    ]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 2) + "---:|")
    for name, runner in runners.items():
        us = 1e6 / medians[name]
        agent_us = us / runner.agents
        spread = (max(rates[name]) - min(rates[name])) / medians[name]
        # the same round's reference over this env's rate: the cost ratio, round by round
        ratios = [r / x for r, x in zip(rates[args.reference], rates[name], strict=True)]
        episode = runner.mean_episode()
        cells: list[Any] = [
            f"`{name}`",
            runner.agents,
            runner.kind,
            f"{medians[name]:,.0f}",
            f"{us:,.1f}",
            f"{us / ref_us:.2f}x",
            f"{min(ratios):.2f}-{max(ratios):.2f}x",
            f"{agent_us:,.1f}",
            f"{agent_us / ref_agent_us:.2f}x",
            f"{spread:.0%}",
            f"{episode:,.0f}" if episode is not None else "-",
        ]
        print("| " + " | ".join(map(str, cells)) + " |")
    print("\n(rounds' range: the env-step cost ratio within each round, lowest and highest;")
    print("spread: (max - min) / median of the rounds' rates; mean episode: steps per episode")
    print("ended while timing, '-' where none ended)")


if __name__ == "__main__":
    main()
