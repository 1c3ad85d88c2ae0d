"""A stability sweep: many seeds of MAPPO/IPPO (or any algorithm) at their defaults, counted for
collapses and summarised as an interquartile mean with a 95% bootstrap interval.

    python benchmarks/stability.py --algorithms mappo ippo --backends torch \
        --seeds 100 101 102 103 104 105 106 107 108 109 --steps 1000000 --jobs 2 --out var/stability

Each run is its own process with one thread (``OMP_NUM_THREADS=1``, ``MARLFORGE_CPU_THREADS=1``),
at most ``--jobs`` at a time, and writes ``<out>/<algorithm>-<backend>-<seed>.json`` (its eval
curve and every logged learner stat); a run whose file exists is not run again, so an interrupted
sweep continues where it stopped. ``--summary`` only prints the table of what is there: a run
still going (or cut off) counts with the evaluations its log shows so far, marked "in progress",
and each group also gets its IQM at every evaluation all its runs reached. ``--summary --against
OTHER`` adds a paired comparison with another sweep of the same seeds (another ``--set``, say):
at each evaluation, the per-seed differences, their mean with a 95% bootstrap interval over the
seeds, and on how many seeds ``--out`` was ahead.
``--env-kwargs N=4 max_cycles=50`` builds the environment with other constructor kwargs (the
variants of ``docs/algorithms.md``). ``--engine mpe2`` trains MPE runs on the reference engine
instead of the vector one (the learning parity of the two engines, ``docs/learners.md``); give
each engine its own ``--out``.

A run **collapsed** when the policy's entropy (the learner's, averaged over each log interval) fell
below ``--entropy-floor`` (0.3 nats; simple_spread's five actions start at 1.61) at any point, or
when an evaluation after the first ``--grace`` env steps scored worse than a uniform random
policy on the same scenario (measured here with a 200-episode match against ``"random"``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "MARLFORGE_CPU_THREADS": "1",
}


def run_one(algorithm: str, backend: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Train one seed in this process; its eval curve, learner stats and times."""
    from learning import EchoHooks, default_spec, parse_overrides

    from learners.training import train

    spec = default_spec(
        algorithm, backend, args.env, seed=seed, steps=args.steps, num_envs=args.num_envs,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        hyperparameters=parse_overrides(args.set), engine=args.engine,
        env_kwargs=parse_overrides(args.env_kwargs),
    )  # fmt: skip
    hooks = EchoHooks(seed)
    train(spec, hooks)
    stats: dict[str, list[tuple[int, float]]] = {}
    team_evals: dict[str, list[tuple[int, float]]] = {}
    for point in hooks.points:
        if point.name.startswith("learner/"):
            stats.setdefault(point.name.removeprefix("learner/"), []).append(
                (point.step, point.value)
            )
        elif point.name.startswith("eval/episode_return/"):
            team = point.name.removeprefix("eval/episode_return/")
            team_evals.setdefault(team, []).append((point.step, point.value))
    return {
        "algorithm": algorithm,
        "backend": backend,
        "seed": seed,
        "env": args.env,
        "steps": args.steps,
        "set": args.set,
        "engine": spec.env.engine,
        "env_kwargs": dict(spec.env.kwargs),
        "evals": hooks.series("eval/episode_return"),
        "team_evals": team_evals,
        "stats": stats,
        "wall_s": time.perf_counter() - hooks.start,
        "cpu_s": time.process_time() - hooks.cpu_start,
    }


def random_returns(
    env_id: str, kwargs: dict[str, Any] | None = None, episodes: int = 200
) -> dict[str, float]:
    """Each team's mean episode return on ``env_id`` (built with ``kwargs``) when every team
    plays uniformly at random. A Gymnasium env is one team, ``"agent"``, over 20 episodes."""
    from learners.enums import EnvSuite
    from learners.envs.catalogue import MPE_ENVS, scenario_teams
    from learners.matches import play_match
    from learners.spec import EnvSpec

    kwargs = dict(kwargs or {})
    if env_id not in MPE_ENVS:
        import gymnasium

        env = gymnasium.make(env_id, **kwargs)
        env.action_space.seed(0)
        returns = []
        for episode in range(20):
            env.reset(seed=episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        env.close()
        return {"agent": float(np.mean(returns))}
    spec = EnvSpec(suite=EnvSuite.MPE, id=env_id, kwargs=kwargs)
    teams = scenario_teams(EnvSuite.MPE, env_id)
    result = play_match(spec, {team: "random" for team in teams}, episodes=episodes, seed=0)
    return {team: float(score.mean_return) for team, score in result.teams.items()}


def collapsed(run: dict[str, Any], floor: float, random: float, grace: int) -> list[str]:
    """Why ``run`` counts as collapsed (empty: it did not)."""
    why = []
    entropy = run["stats"].get("entropy", [])
    if entropy:
        step, low = min(entropy, key=lambda sv: sv[1])
        if low < floor:
            why.append(f"entropy {low:.2f} at {step}")
    late = [(s, v) for s, v in run["evals"] if s > grace and v < random]
    if late:
        step, value = min(late, key=lambda sv: sv[1])
        why.append(f"eval {value:.1f} at {step}")
    return why


def _team_curve(group: list[dict[str, Any]], team: str) -> list[tuple[int, list[float]]]:
    """``team``'s evaluation returns of every run of ``group``, step by step."""
    steps = sorted({step for r in group for step, _ in r["team_evals"].get(team, [])})
    return [
        (step, [v for r in group for s, v in r["team_evals"].get(team, []) if s == step])
        for step in steps
    ]


ECHO = re.compile(
    r"\s*seed (?P<seed>-?\d+) step (?P<step>\d+): (?P<value>\S+)\s+"
    r"\((?P<wall>\d+) s, (?P<cpu>\d+) s CPU(?:, entropy (?P<entropy>\S+))?\)"
)


def partial_run(log: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """A run still going (or cut off) as far as its log shows: the evaluations ``EchoHooks``
    printed as they landed, the entropy at each, and the CPU seconds at the last; None when the
    log has no evaluation yet or is not named as a run's. Its ``evals`` end where the run got to,
    so a summary of partial runs compares them at their common evaluations (``common_evals``)."""
    from learning import parse_overrides, run_env_kwargs

    parts = log.stem.rsplit("-", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        return None  # not a run's log (<algorithm>-<backend>-<seed>.log): a parent's, say
    algorithm, backend, seed = parts
    evals: list[tuple[int, float]] = []
    entropy: list[tuple[int, float]] = []
    cpu = 0.0
    for line in log.read_text(errors="replace").splitlines():
        match = ECHO.fullmatch(line)
        if match is None:
            continue
        step = int(match["step"])
        evals.append((step, float(match["value"])))
        if match["entropy"] is not None:
            entropy.append((step, float(match["entropy"])))
        cpu = float(match["cpu"])
    if not evals:
        return None
    return {
        "algorithm": algorithm, "backend": backend, "seed": int(seed), "env": args.env,
        "env_kwargs": run_env_kwargs(algorithm, args.env, parse_overrides(args.env_kwargs)),
        "evals": evals, "team_evals": {}, "stats": {"entropy": entropy} if entropy else {},
        "cpu_s": cpu, "partial": True,
    }  # fmt: skip


def common_evals(group: list[dict[str, Any]]) -> list[tuple[int, list[float]]]:
    """Each evaluation step that every run of ``group`` reached, with the runs' returns there."""
    steps = set.intersection(*({s for s, _ in r["evals"]} for r in group))
    return [(step, [dict(r["evals"])[step] for r in group]) for step in sorted(steps)]


def load_runs(out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every run of sweep folder ``out``: its result file, or what its log shows so far."""
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    # Runs without a result file yet: what their logs show so far (marked in the table).
    for log in sorted(out.glob("*.log")):
        if not log.with_suffix(".json").exists() and (run := partial_run(log, args)):
            runs.append(run)
    return runs


@dataclass(frozen=True)
class PairedPoint:
    """Two sweeps' runs of one group compared seed by seed at one evaluation: the per-seed
    differences (this sweep's return minus the other's), their mean and its 95% interval
    (resampling the seeds, each with its pair), and on how many seeds this sweep was ahead."""

    step: int
    seeds: list[int]
    differences: list[float]
    low: float
    high: float

    @property
    def mean(self) -> float:
        return float(np.mean(self.differences))

    @property
    def ahead(self) -> int:
        return sum(d > 0 for d in self.differences)


def paired_comparison(
    runs: list[dict[str, Any]], other: list[dict[str, Any]]
) -> dict[tuple[str, str], list[PairedPoint]]:
    """For each (algorithm, backend) group in both sweeps, at each evaluation that every seed
    both sweeps ran reached in both: the paired differences. Two settings on the same seeds
    differ by less noise than two sets of seeds do, since a seed's environment draws and
    initial weights are the same on both sides."""
    from core.sweeps.stats import bootstrap_ci, mean

    def by_group(items: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, dict[int, float]]]:
        groups: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
        for run in items:
            key = (run["algorithm"], run["backend"])
            groups.setdefault(key, {})[run["seed"]] = {int(s): float(v) for s, v in run["evals"]}
        return groups

    mine, theirs = by_group(runs), by_group(other)
    result: dict[tuple[str, str], list[PairedPoint]] = {}
    for key in sorted(mine.keys() & theirs.keys()):
        seeds = sorted(mine[key].keys() & theirs[key].keys())
        if not seeds:
            continue
        steps = set.intersection(*(set(mine[key][s]) & set(theirs[key][s]) for s in seeds))
        points = []
        for step in sorted(steps):
            diffs = [mine[key][s][step] - theirs[key][s][step] for s in seeds]
            ci = bootstrap_ci(diffs, mean)
            points.append(PairedPoint(step, seeds, diffs, ci.low, ci.high))
        result[key] = points
    return result


def print_paired(out: Path, against: Path, args: argparse.Namespace) -> None:
    """``--against``: this sweep's runs minus the other's, seed by seed."""
    compared = paired_comparison(load_runs(out, args), load_runs(against, args))
    if not compared:
        print(f"{out} and {against} share no (algorithm, backend, seed) run: nothing to pair")
    for (algorithm, backend), points in compared.items():
        if not points:
            print(f"{algorithm} {backend}: no evaluation that every common seed reached in both")
            continue
        seeds = ", ".join(map(str, points[0].seeds))
        print(f"{algorithm} {backend}: {out} minus {against}, paired on seeds {seeds}")
        print("| env steps | difference per seed | mean [95% CI] | seeds ahead |")
        print("|---:|---|---|---:|")
        for p in points:
            print(
                f"| {p.step // 1000}k | {', '.join(f'{d:+.1f}' for d in p.differences)} | "
                f"{p.mean:+.2f} [{p.low:+.2f}, {p.high:+.2f}] | {p.ahead} of {len(p.seeds)} |"
            )


def summary(out: Path, args: argparse.Namespace) -> None:
    from learning import parse_overrides

    from core.sweeps.stats import bootstrap_ci, iqm

    runs = load_runs(out, args)
    randoms: dict[str, dict[str, float]] = {}

    def random_play(run: dict[str, Any]) -> dict[str, float]:
        """Random play on the run's own env (continuous actions for the DDPG family); a run file
        that did not record its kwargs: the command line's."""
        kwargs = run.get("env_kwargs", parse_overrides(args.env_kwargs))
        key = json.dumps([run["env"], kwargs], sort_keys=True)
        if key not in randoms:
            randoms[key] = random_returns(run["env"], kwargs)
            mean = float(np.mean(list(randoms[key].values())))
            teams = randoms[key]
            per_team = ", ".join(f"{t} {v:.1f}" for t, v in sorted(teams.items()))
            print(
                f"uniform random policy on {run['env']} {kwargs or ''}: {mean:.1f}"
                + (f" (per team: {per_team})" if len(teams) > 1 else "")
            )
        return randoms[key]

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["algorithm"], run["backend"]), []).append(run)
    for group in groups.values():
        random_play(group[0])
    print("| algorithm | backend | seeds | final return per seed | IQM [95% CI] | collapses |")
    print("|---|---|---|---|---|---|")
    for (algorithm, backend), group in sorted(groups.items()):
        group.sort(key=lambda r: r["seed"])
        teams_random = random_play(group[0])
        random = float(np.mean(list(teams_random.values())))
        finals = [r["evals"][-1][1] for r in group]
        point = float(iqm(finals))
        ci = bootstrap_ci(finals, iqm)
        falls = [(r["seed"], collapsed(r, args.entropy_floor, random, args.grace)) for r in group]
        falls = [(s, why) for s, why in falls if why]
        seeds = f"{group[0]['seed']}-{group[-1]['seed']}" if len(group) > 1 else group[0]["seed"]
        fall_text = "; ".join(f"seed {s}: {', '.join(why)}" for s, why in falls)
        per_seed = ", ".join(
            f"{r['evals'][-1][1]:.1f}"
            + (f" (in progress: {r['evals'][-1][0] // 1000}k)" if r.get("partial") else "")
            for r in group
        )
        print(
            f"| {algorithm} | {backend} | {seeds} | {per_seed} | {point:.1f} "
            f"[{ci.low:.1f}, {ci.high:.1f}] | {len(falls)}/{len(group)}"
            + (f" ({fall_text})" if falls else "")
            + " |"
        )
        entropy = [
            min(v for _, v in r["stats"]["entropy"]) for r in group if "entropy" in r["stats"]
        ]
        cpu = [r["cpu_s"] for r in group]
        teams = sorted({t for r in group for t in r.get("team_evals", {})})
        for team in teams if len(teams) > 1 else []:
            ends = [r["team_evals"][team][-1][1] for r in group if team in r["team_evals"]]
            curve = "; ".join(
                f"{step // 1000}k: " + ", ".join(f"{v:.1f}" for v in values)
                for step, values in _team_curve(group, team)
            )
            at_random = teams_random[team]
            print(
                f"  team {team}: end IQM {float(iqm(ends)):.1f} (random play {at_random:.1f});"
                f" per seed at each evaluation: {curve}"
            )
        if len(group) > 2:
            curve = "; ".join(
                f"{step // 1000}k {float(iqm(values)):.1f}" for step, values in common_evals(group)
            )
            print(f"  IQM at each evaluation every run reached: {curve}")
        if entropy:
            print(
                f"  lowest entropy per run: min {min(entropy):.2f}, median {np.median(entropy):.2f}"
            )
        print(f"  CPU seconds per run: median {np.median(cpu):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--algorithms", nargs="+", default=["mappo", "ippo"])
    parser.add_argument("--backends", nargs="+", default=["torch"])
    parser.add_argument("--env", default="simple_spread_v3")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 110)))
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--env-kwargs", nargs="*", default=[], metavar="KEY=VALUE",
        help="the environment's constructor kwargs (mpe2's N, max_cycles, ...; JSON values)",
    )  # fmt: skip
    parser.add_argument(
        "--engine", choices=["vector", "mpe2"], help="env.engine of MPE runs (default: the spec's)"
    )
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "stability")
    parser.add_argument("--entropy-floor", type=float, default=0.3)
    parser.add_argument("--grace", type=int, default=100_000)
    parser.add_argument("--summary", action="store_true", help="only print the table")
    parser.add_argument(
        "--against", type=Path, metavar="OUT",
        help="after the summary, compare the runs of --out with those of another sweep folder, "
        "seed by seed (the same seeds, another setting)",
    )  # fmt: skip
    parser.add_argument(
        "--one", nargs=3, metavar=("ALGORITHM", "BACKEND", "SEED"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()

    if args.one is not None:
        algorithm, backend, seed = args.one
        result = run_one(algorithm, backend, int(seed), args)
        path = args.out / f"{algorithm}-{backend}-{seed}.json"
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps(result))
        partial.replace(path)
        return

    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summary:
        todo = [
            (a, b, s)
            for a in args.algorithms
            for b in args.backends
            for s in args.seeds
            if not (args.out / f"{a}-{b}-{s}.json").exists()
        ]
        passed = sys.argv[1:]

        def launch(job: tuple[str, str, int]) -> None:
            a, b, s = job
            log = args.out / f"{a}-{b}-{s}.log"
            with log.open("w") as handle:
                code = subprocess.call(
                    [sys.executable, __file__, *passed, "--one", a, b, str(s)],
                    stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, **ONE_THREAD},
                )  # fmt: skip
            print(f"{a} {b} seed {s}: exit {code}", flush=True)

        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(launch, todo))
    summary(args.out, args)
    if args.against is not None:
        print_paired(args.out, args.against, args)


if __name__ == "__main__":
    main()
