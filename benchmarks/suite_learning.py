"""Learning on the environment suites: several algorithms and tasks over fresh seeds, summarised as
the interquartile mean with a 95% bootstrap interval (``core.sweeps.stats``, rliable's
definitions), beside a published figure where one is given.

    python benchmarks/suite_learning.py --steps 400000 --seeds 500 501 502 503 504 --jobs 2 \\
        --run ippo:lbf:Foraging-8x8-2p-2f-coop-v3 --run mappo:lbf:Foraging-8x8-2p-2f-coop-v3

Each run trains with the algorithm's defaults on that env (``parse_spec`` fills them) and
``--num-envs`` copies, evaluating the greedy policy every ``--eval-every`` env steps on
``--eval-episodes`` episodes. A run's scores are its last evaluation's return (``final``) and the
mean of all its evaluations (``average``: what Papoudakis et al. (2021) call average returns), each
as the **sum over agents** of the episode's return: MARLForge's ``eval/episode_return`` is the
mean over agents, EPyMARL reports the team's sum, so the script multiplies by the agent count.
Threads are pinned to one per run; ``--jobs`` runs that many seeds side by side.
"""

from __future__ import annotations

import argparse
import os

for _var in (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
):
    os.environ.setdefault(_var, "1")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.sweeps.stats import bootstrap_ci, iqm  # noqa: E402


def _train_one(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from learners.admission.parse import parse_spec
    from learners.envs.catalogue import suite
    from learners.hooks import MemoryHooks
    from learners.training import train

    algorithm, suite_name, env_id = job["run"].split(":")
    spec = parse_spec(
        {
            "name": f"{job['run']}-{job['seed']}",
            "algorithm": algorithm,
            "backend": job["backend"],
            "env": {"suite": suite_name, "id": env_id, "num_envs": job["num_envs"]},
            "total_steps": job["steps"],
            "seed": job["seed"],
            "device": "cpu",
            "hyperparameters": job["set"],
            "evaluation": {"every_steps": job["eval_every"], "episodes": job["eval_episodes"]},
            "checkpoint": {"every_steps": job["steps"], "keep_last": 1},
        }
    )
    agents = len(suite(suite_name).entry(env_id).teams)
    hooks = MemoryHooks()
    started = time.perf_counter()
    train(spec, hooks)
    returns = [agents * value for _, value in hooks.series("eval/episode_return")]
    return {
        "run": job["run"],
        "seed": job["seed"],
        "seconds": time.perf_counter() - started,
        "returns": returns,
        "final": returns[-1],
        "average": float(np.mean(returns)),
    }


def _summary(values: list[float]) -> str:
    interval = bootstrap_ci(values)
    return f"{float(iqm(values)):.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, metavar="ALGO:SUITE:ID")
    parser.add_argument("--seeds", type=int, nargs="+", default=[500, 501, 502, 503, 504])
    parser.add_argument("--steps", type=int, default=400_000)
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--published", nargs="*", default=[], metavar="ALGO:SUITE:ID=VALUE")
    parser.add_argument("--json", type=Path, help="also write every run's scores here")
    args = parser.parse_args(argv)
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    published = dict(p.rsplit("=", 1) for p in args.published)
    jobs = [
        {
            "run": run, "seed": seed, "steps": args.steps, "backend": args.backend,
            "num_envs": args.num_envs, "eval_every": args.eval_every,
            "eval_episodes": args.eval_episodes, "set": overrides,
        }
        for run in args.run
        for seed in args.seeds
    ]  # fmt: skip
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(_train_one, jobs))
    wall = time.perf_counter() - started
    for r in results:
        print(
            f"{r['run']} seed {r['seed']}: final {r['final']:.3f}, average {r['average']:.3f}, "
            f"{r['seconds']:.0f} s"
        )
    print()
    print(f"{args.steps:,} env steps per run, seeds {args.seeds}, {wall:.0f} s wall")
    print("| algorithm:suite:id | final, IQM [95% CI] | average, IQM [95% CI] | published |")
    print("|---|---|---|---|")
    for run in args.run:
        mine = [r for r in results if r["run"] == run]
        final = _summary([r["final"] for r in mine])
        average = _summary([r["average"] for r in mine])
        print(f"| {run} | {final} | {average} | {published.get(run, '-')} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
