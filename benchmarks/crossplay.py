"""Cross-play (issue #19): one algorithm's teams against another's on the competitive MPE scenarios.

    python benchmarks/crossplay.py --out /tmp/crossplay --steps 30000 --seeds 0 1 2 --reuse
    python benchmarks/crossplay.py --algorithms MAPPO IPPO --out /tmp/crossplay-ppo ...

Lowe et al. (NeurIPS 2017) compare MADDPG against DDPG agents, independent learners whose critic
sees only their own observation and action. Here the DDPG baseline is ``maddpg`` with
``centralised_critic: false`` (``learners.algorithms.maddpg``): the same actors, the same parameter
sharing within a team and the same hyperparameters, only the critic's input differs. The same
question for PPO is ``--algorithms MAPPO IPPO`` (a critic on the global state against one on the
agent's own observation). The algorithms compared must act in the same action space (MADDPG and
DDPG continuous, MAPPO and IPPO discrete: the benchmarks' MPE settings), since a match seats both
teams in one env.

For each scenario (the learners' MPE defaults, 8 envs) it trains each algorithm over the seeds,
one run at a time in this process with one CPU thread (``MARLFORGE_CPU_THREADS``), and keeps
each run's final checkpoint and its last evaluation's per-team returns under ``--out``; ``--reuse``
skips a run whose checkpoint is there, so an interrupted invocation continues where it stopped.
Then it plays matches (``learners.matches.play_match``, greedy policies):

- every pairing, adversary team from algorithm X's run and agent team from algorithm Y's run,
  for every pairing of seeds (seeds x seeds matches per pairing);
- each algorithm against random play, in both roles, once per seed, and random play against itself
  (what a team's return is when neither side has learned).

Per scenario it prints markdown tables: each pairing's team mean returns, the mean over its matches
with a 95% Student-t interval across those matches, and the scenario's natural score
(``learners.envs.scores``) averaged over them. Matches of one pairing share runs, so the interval
is across matches, not across independent seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("MARLFORGE_CPU_THREADS", "1")  # one thread per op: the runs' own setting
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy or a framework starts its pool

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.learning import EchoHooks, default_spec, run_env_kwargs  # noqa: E402
from learners.enums import EnvSuite  # noqa: E402
from learners.envs.catalogue import scenario_teams  # noqa: E402
from learners.matches import RANDOM, MatchResult, TeamPolicy, play_match  # noqa: E402
from learners.spec import EnvSpec, ExperimentSpec  # noqa: E402
from learners.training import train  # noqa: E402

SCENARIOS = ("simple_adversary_v3", "simple_tag_v3", "simple_push_v3")
ALGORITHMS: dict[str, tuple[str, dict[str, Any]]] = {
    "MADDPG": ("maddpg", {}),
    "DDPG": ("maddpg", {"centralised_critic": False}),
    "MAPPO": ("mappo", {}),
    "IPPO": ("ippo", {}),
}
"""Each comparable algorithm: the learner it runs and its hyperparameters over that learner's
defaults."""


class CheckpointHooks(EchoHooks):
    """``EchoHooks`` that write the checkpoints into a folder."""

    def __init__(self, seed: int, checkpoint_dir: Path) -> None:
        super().__init__(seed)
        self.checkpoint_dir = checkpoint_dir


@dataclass(frozen=True)
class Run:
    """One finished training run: its final checkpoint and last evaluation per team."""

    checkpoint: Path
    eval_returns: dict[str, float]
    seconds: float


def spec_for(args: argparse.Namespace, scenario: str, algorithm: str, seed: int) -> ExperimentSpec:
    learner, hyperparameters = ALGORITHMS[algorithm]
    return default_spec(
        learner, "torch", scenario, seed=seed, steps=args.steps, num_envs=8,
        eval_every=args.eval_every or args.steps, eval_episodes=args.eval_episodes,
        hyperparameters=dict(hyperparameters),
    )  # fmt: skip


def action_space_errors(algorithms: list[str], scenario: str) -> list[str]:
    """Why these algorithms cannot meet in one match on the scenario: each compared algorithm's
    env, against the first's (empty when every one acts in the same action space)."""
    envs = {x: run_env_kwargs(ALGORITHMS[x][0], scenario) for x in algorithms}
    first = algorithms[0]
    kind = envs[first].get("continuous_actions", False)
    return [
        f"{x} acts {'continuously' if not kind else 'discretely'}, {first} does not: "
        "a match seats both teams in one env"
        for x in algorithms[1:]
        if envs[x].get("continuous_actions", False) != kind
    ]


def train_run(args: argparse.Namespace, scenario: str, algorithm: str, seed: int) -> Run:
    """Train (or, with ``--reuse``, find) one run; its summary is kept beside the checkpoint."""
    folder = args.out / scenario / f"{algorithm.lower()}-seed{seed}"
    summary = folder / "run.json"
    if args.reuse and summary.exists():
        data = json.loads(summary.read_text())
        print(f"{scenario} {algorithm} seed {seed}: reused ({data['seconds']:.0f} s)", flush=True)
        return Run(folder / data["checkpoint"], data["eval_returns"], data["seconds"])
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_for(args, scenario, algorithm, seed)
    hooks = CheckpointHooks(seed, folder)
    print(f"{scenario} {algorithm} seed {seed}: training {args.steps} steps", flush=True)
    train(spec, hooks)
    seconds = time.perf_counter() - hooks.start
    step, checkpoint = hooks.checkpoints[-1]
    assert checkpoint is not None and step == args.steps, hooks.checkpoints
    teams = scenario_teams(EnvSuite.MPE, scenario)
    eval_returns = {t: hooks.series(f"eval/episode_return/{t}")[-1][1] for t in teams}
    summary.write_text(
        json.dumps(
            {"checkpoint": checkpoint.name, "eval_returns": eval_returns, "seconds": seconds}
        )
    )
    returns = ", ".join(f"{t} {v:.1f}" for t, v in eval_returns.items())
    print(f"{scenario} {algorithm} seed {seed}: {seconds:.0f} s; last eval {returns}", flush=True)
    return Run(checkpoint, eval_returns, seconds)


def mean_ci(values: list[float]) -> str:
    """``mean ± half-width`` of the 95% Student-t interval (just the mean for one value)."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return f"{mean:.1f}"
    half = stats.t.ppf(0.975, len(values) - 1) * stats.sem(values)
    return f"{mean:.1f} ± {half:.1f}"


def play(
    env: EnvSpec, teams: dict[str, TeamPolicy], args: argparse.Namespace, seed: int
) -> MatchResult:
    return play_match(env, teams, episodes=args.episodes, seed=seed)


def pairing_row(label: str, results: list[MatchResult], teams: tuple[str, ...]) -> str:
    returns = [mean_ci([r.teams[t].mean_return for r in results]) for t in teams]
    names = sorted(results[0].score)
    score = ", ".join(f"{n} {np.mean([r.score[n] for r in results]):.2f}" for n in names)
    return f"| {label} | {len(results)} | " + " | ".join(returns) + f" | {score} |"


def crossplay(args: argparse.Namespace, scenario: str, runs: dict[str, list[Run]]) -> None:
    """Play and print the scenario's pairings; adversary first, as the scenario orders teams."""
    teams = scenario_teams(EnvSuite.MPE, scenario)
    adversary, agent = teams
    env = spec_for(args, scenario, next(iter(runs)), 0).env
    start = time.perf_counter()
    header = f"| {adversary} vs {agent} | matches | " + " | ".join(teams) + " | score |"
    lines = [header, "|" + "---|" * (len(teams) + 3)]
    for x in runs:
        for y in runs:
            results = [
                play(env, {adversary: a.checkpoint, agent: b.checkpoint}, args, seed=10 * i + j)
                for i, a in enumerate(runs[x])
                for j, b in enumerate(runs[y])
            ]
            lines.append(pairing_row(f"{x} vs {y}", results, teams))
    for x in runs:
        vs_random = [play(env, {adversary: r.checkpoint, agent: RANDOM}, args, 0) for r in runs[x]]
        lines.append(pairing_row(f"{x} vs random", vs_random, teams))
        random_vs = [play(env, {adversary: RANDOM, agent: r.checkpoint}, args, 0) for r in runs[x]]
        lines.append(pairing_row(f"random vs {x}", random_vs, teams))
    both_random = play(env, {adversary: RANDOM, agent: RANDOM}, args, 0)
    lines.append(pairing_row("random vs random", [both_random], teams))
    print(f"\n### {scenario}: cross-play ({time.perf_counter() - start:.0f} s of matches)\n")
    print("\n".join(lines))
    print(f"\n### {scenario}: each run's last evaluation (self-play), mean ± 95% CI over seeds\n")
    print(f"| algorithm | seeds | {' | '.join(teams)} | training s per run |")
    print("|" + "---|" * (len(teams) + 3))
    for x, xs in runs.items():
        returns = " | ".join(mean_ci([r.eval_returns[t] for r in xs]) for t in teams)
        print(f"| {x} | {len(xs)} | {returns} | {np.mean([r.seconds for r in xs]):.0f} |")
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument(
        "--algorithms", nargs="+", default=["MADDPG", "DDPG"], choices=list(ALGORITHMS),
        help="the algorithms whose teams meet (one action space: MADDPG DDPG, or MAPPO IPPO)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=50, help="episodes per match")
    parser.add_argument("--eval-every", type=int, default=0, help="default: only at the end")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reuse", action="store_true", help="skip runs whose checkpoint exists")
    args = parser.parse_args()
    algorithms = list(dict.fromkeys(args.algorithms))
    for scenario in args.scenarios:
        if errors := action_space_errors(algorithms, scenario):
            parser.error("; ".join(errors))
    for scenario in args.scenarios:
        runs = {x: [train_run(args, scenario, x, seed) for seed in args.seeds] for x in algorithms}
        crossplay(args, scenario, runs)


if __name__ == "__main__":
    main()
