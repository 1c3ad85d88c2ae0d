"""Grid, ASHA and PBT side by side on MAPPO simple_spread_v3, the same env-step budget each (issue
#54's evidence).

    python benchmarks/search_comparison.py                                  # 3 sweep seeds
    python benchmarks/search_comparison.py --member-steps 96000 --members 4 \
        --sweep-seeds 0 1 2 --fresh-episodes 100

Each method spends about ``members × member-steps`` env steps on MAPPO (torch, the vector engine,
8 copies, the defaults but ``linear_lr_decay: false``, which PBT needs and the others get too, so
that only the search differs) over the same space: the step size, log-uniform in [1e-4, 3e-3], and
the entropy coefficient, uniform in [0, 0.03].

- **grid**: ``members`` step sizes spread evenly in log space over the range (the entropy
  coefficient at its default), each trained once for ``member-steps``.
- **asha**: random configurations, trained one after another as one worker would until the
  others' budget is spent, each stopped at a rung (a quarter and a half of ``member-steps``) by
  the service's own rule (``core.sweeps.asha.decide``, η = 2): it goes on only while it is among
  the best half of the configurations scored at that rung so far.
- **pbt**: ``members`` members in four rounds of ``member-steps / 4``, decided by the service's
  own rule (``core.sweeps.pbt.decide``, quantile 0.25) and continued as the service continues them
  (``pbt.continuation``: each round a run that resumes a checkpoint with the member's schedule).

The policy each search found (its best configuration's, or best member's, final checkpoint, by the
search's own evaluation return) is then evaluated afresh: ``--fresh-episodes`` greedy episodes on
environment seeds no run trained or evaluated on. Per method the script prints each sweep seed's
fresh return, the IQM over sweep seeds with its 95% bootstrap interval (``core.sweeps.stats``),
the env steps spent and the wall-clock. One thread; one run at a time.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MARLFORGE_CPU_THREADS", "1")  # one thread per op: the runs' own setting
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy or a framework starts its pool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from core.sweeps import asha, pbt  # noqa: E402
from core.sweeps.distributions import sampler, six  # noqa: E402
from core.sweeps.stats import bootstrap_ci, iqm  # noqa: E402
from learners.admission.parse import parse_spec  # noqa: E402
from learners.envs.factory import make_vec_env  # noqa: E402
from learners.hooks import MemoryHooks, MetricPoint  # noqa: E402
from learners.policy import load_policy  # noqa: E402
from learners.training import train  # noqa: E402

SPACE = {
    "hyperparameters.learning_rate": {"log_uniform": [1e-4, 3e-3]},
    "hyperparameters.entropy_coef": {"uniform": [0.0, 0.03]},
}
METRIC = "eval/episode_return"
FRESH_SEED = 900_000  # env seeds from here on: no run of the study uses them
RUN_ID = "0" * 26  # what a stored spec's init names; train() reads the file it is given


def _spec(
    params: dict[str, Any], seed: int, total: int, eval_every: int, **extra: Any
) -> dict[str, Any]:
    hyperparameters = {"linear_lr_decay": False}
    hyperparameters.update({k.removeprefix("hyperparameters."): v for k, v in params.items()})
    return {
        "name": "search-comparison",
        "algorithm": "mappo",
        "backend": "torch",
        "env": {"suite": "mpe", "id": "simple_spread_v3", "engine": "vector", "num_envs": 8},
        "total_steps": total,
        "seed": seed,
        "device": "cpu",
        "hyperparameters": hyperparameters,
        "evaluation": {"every_steps": eval_every, "episodes": 20},
        "checkpoint": {"every_steps": eval_every, "keep_last": 1},
        **extra,
    }


class Run:
    """One training run in a folder of its own; its final checkpoint and evaluation."""

    def __init__(self, folder: Path, spec: dict[str, Any], resume: Path | None = None) -> None:
        folder.mkdir(parents=True)
        self.hooks = RungHooks(folder)
        self.spec = parse_spec(spec)
        self.resume = resume

    def train(self) -> Run:
        train(self.spec, self.hooks, resume_from=self.resume)
        return self

    @property
    def checkpoint(self) -> Path:
        path = self.hooks.checkpoints[-1][1]
        assert path is not None
        return path

    @property
    def final(self) -> float:
        return self.hooks.series(METRIC)[-1][1]


class RungHooks(MemoryHooks):
    """``MemoryHooks`` that stop the run when ``decide`` (called with each evaluation) says so."""

    def __init__(self, folder: Path) -> None:
        super().__init__(checkpoint_dir=folder)
        self.decide: Any = None
        self.stop = False

    def metrics(self, points: Any) -> None:
        super().metrics(points)
        for point in points:
            if isinstance(point, MetricPoint) and point.name == METRIC and self.decide:
                self.stop = self.stop or bool(self.decide(point.step, point.value))

    def should_stop(self) -> bool:
        return self.stop


def grid(folder: Path, sweep_seed: int, members: int, steps: int) -> tuple[Run, int]:
    low, high = SPACE["hyperparameters.learning_rate"]["log_uniform"]
    rates = [six(math.exp(x)) for x in np.linspace(math.log(low), math.log(high), members)]
    runs = [
        Run(
            folder / f"grid{i}",
            _spec({"hyperparameters.learning_rate": lr}, 1000 * sweep_seed + i, steps, steps // 4),
        ).train()
        for i, lr in enumerate(rates)
    ]
    best = max(runs, key=lambda r: r.final)
    return best, sum(r.hooks.checkpoints[-1][0] for r in runs)


def successive_halving(folder: Path, sweep_seed: int, members: int, steps: int) -> tuple[Run, int]:
    early = asha.EarlyStopping(rungs=[steps // 4, steps // 2], reduction_factor=2)
    rng = np.random.default_rng(sweep_seed)
    samplers = {p: sampler(d) for p, d in SPACE.items()}
    scores: dict[int, dict[str, list[float | None]]] = {r: {} for r in early.rungs}
    finished, spent, i = [], 0, 0
    # Configurations one after another until the budget the others get is spent (the last one
    # may overrun it by what it trains past its first rung).
    while spent + steps // 4 <= members * steps:
        params = {p: draw(rng) for p, draw in samplers.items()}
        run = Run(folder / f"asha{i}", _spec(params, 1000 * sweep_seed + i, steps, steps // 4))
        key = f"c{i}"

        def decide(step: int, value: float, key: str = key) -> bool:
            if step not in scores:
                return False
            scores[step][key] = [value]
            rung = asha.decide(early, step, key, scores[step])
            return rung is not None and rung.stops

        run.hooks.decide = decide
        run.train()
        spent += run.hooks.checkpoints[-1][0]
        if run.hooks.checkpoints[-1][0] == steps:
            finished.append(run)
        i += 1
    return max(finished, key=lambda r: r.final), spent


def population(folder: Path, sweep_seed: int, members: int, steps: int) -> tuple[Run, int]:
    search = pbt.PopulationSearch(method="pbt", population=members, round_steps=steps // 4)
    rng = np.random.default_rng(sweep_seed)
    samplers = {p: sampler(d) for p, d in SPACE.items()}
    params = [{p: draw(rng) for p, draw in samplers.items()} for _ in range(members)]
    runs = [
        Run(
            folder / f"pbt-m{m}-r0",
            _spec(params[m], 1000 * sweep_seed + m, search.round_steps, search.round_steps),
        ).train()
        for m in range(members)
    ]
    spent = members * search.round_steps
    for round_ in range(1, 4):
        scored = [pbt.Member(m, params[m], runs[m].final) for m in range(members)]
        decisions = pbt.decide(scored, search, SPACE, sweep_seed, round_ - 1)
        assert decisions is not None
        following = []
        for d in decisions:
            source = runs[d.source]
            spec = pbt.continuation(
                source.spec.model_dump(mode="json"),
                RUN_ID,
                d,
                params[d.source],
                round_,
                search,
                f"pbt m{d.member} r{round_}",
            )
            spec["init"] = None  # the file is handed to train() as the checkpoint to resume
            following.append(
                Run(folder / f"pbt-m{d.member}-r{round_}", spec, source.checkpoint).train()
            )
        params = [d.params for d in decisions]
        runs = following
        spent += members * search.round_steps
    return max(runs, key=lambda r: r.final), spent


def fresh_return(checkpoint: Path, episodes: int, seed: int) -> float:
    """The mean return of ``episodes`` greedy episodes on env seeds no run used."""
    policy = load_policy(checkpoint)
    spec = parse_spec(policy.manifest.spec)
    copies = min(episodes, 16)
    env = make_vec_env(spec.env, FRESH_SEED + seed, num_envs=copies, workers=0)
    returns: list[float] = []
    try:
        obs = env.reset(episode_index=np.zeros(copies, np.int64))
        while len(returns) < episodes:
            obs, transition = env.step(policy.act(obs))
            policy.end_episodes(transition.terminated | transition.truncated)
            ended = np.flatnonzero(transition.episode_lengths)
            returns += [float(transition.episode_returns[i]) for i in ended]
    finally:
        env.close()
    return float(np.mean(returns[:episodes]))


METHODS = {"grid": grid, "asha": successive_halving, "pbt": population}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=4)
    # A quarter of it must be a whole number of MAPPO's updates (8 copies x 100 steps).
    parser.add_argument("--member-steps", type=int, default=96_000)
    parser.add_argument("--sweep-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--fresh-episodes", type=int, default=100)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args()
    results: dict[str, list[tuple[float, int, float]]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory() as scratch:
        for sweep_seed in args.sweep_seeds:
            for method in args.methods:
                start = time.perf_counter()
                best, spent = METHODS[method](
                    Path(scratch) / f"{method}-{sweep_seed}", sweep_seed, args.members,
                    args.member_steps,
                )  # fmt: skip
                seconds = time.perf_counter() - start
                fresh = fresh_return(best.checkpoint, args.fresh_episodes, sweep_seed)
                results[method].append((fresh, spent, seconds))
                found = {k: v for k, v in best.spec.hyperparameters.items()
                         if k in ("learning_rate", "entropy_coef")}  # fmt: skip
                print(
                    f"{method} sweep seed {sweep_seed}: fresh return {fresh:.2f} (its own eval "
                    f"{best.final:.2f}), {spent:,} env steps, {seconds:.0f} s, found {found}, "
                    f"schedule {[c.model_dump() for c in best.spec.schedule]}",
                    flush=True,
                )
    print("\nmethod  fresh-seed return IQM [95% CI] over sweep seeds   env steps   wall-clock")
    for method, rows in results.items():
        values = [r[0] for r in rows]
        ci = bootstrap_ci(values, iqm)
        steps = int(np.mean([r[1] for r in rows]))
        seconds = float(np.mean([r[2] for r in rows]))
        print(
            f"{method:6}  {iqm(values):8.2f} [{ci.low:.2f}, {ci.high:.2f}]  "
            f"({', '.join(f'{v:.2f}' for v in values)})   {steps:,}   {seconds:.0f} s per sweep"
        )


if __name__ == "__main__":
    main()
