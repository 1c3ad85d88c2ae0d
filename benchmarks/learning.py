"""Learning curves: train a spec over several seeds and print eval return against env steps.

    python benchmarks/learning.py --algorithm ddpg --env Pendulum-v1 --seeds 0 1 2 --steps 20000
    python benchmarks/learning.py --spec examples/ddpg_pendulum.json --seeds 0 1 2

Each seed trains with the algorithm's defaults (per-env defaults included) unless ``--spec`` gives a
whole spec; ``--set key=value`` overrides a hyperparameter (JSON values). It prints every seed's
eval returns, the mean over seeds at each evaluation, the wall time, and whether the mean at the end
reaches ``--target``, by default the algorithm's target on its environment where the learners issue
sets one (``TARGETS``: DDPG on Pendulum-v1 -200 within 20,000 env steps; on simple_spread_v3 within
1M, MAPPO and IPPO -18.1, MADDPG -15.9, Weighted QMIX -12.6).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learners.admission.parse import parse_spec  # noqa: E402
from learners.enums import EnvSuite  # noqa: E402
from learners.envs.catalogue import MPE_ENVS  # noqa: E402
from learners.hooks import MemoryHooks, MetricPoint  # noqa: E402
from learners.spec import ExperimentSpec  # noqa: E402
from learners.training import train  # noqa: E402


def run_env_kwargs(
    algorithm: str, env_id: str, env_kwargs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The constructor kwargs a benchmark run's env gets: ``env_kwargs``, and on MPE continuous
    actions for the DDPG family (what their tables were measured with)."""
    kwargs: dict[str, Any] = dict(env_kwargs or {})
    if env_id in MPE_ENVS and algorithm in ("ddpg", "maddpg"):
        kwargs.setdefault("continuous_actions", True)
    return kwargs


def default_spec(
    algorithm: str,
    backend: str,
    env_id: str,
    *,
    seed: int,
    steps: int,
    num_envs: int = 1,
    eval_every: int = 2000,
    eval_episodes: int = 10,
    hyperparameters: dict[str, Any] | None = None,
    device: str = "cpu",
    engine: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> ExperimentSpec:
    """A spec with the algorithm's defaults; checkpoints only at the end. ``engine`` sets
    ``env.engine`` (MPE: ``"vector"``, the default, or ``"mpe2"``); ``env_kwargs`` go to the
    environment's constructor (mpe2's ``N``, ``max_cycles``, ...)."""
    suite = EnvSuite.MPE if env_id in MPE_ENVS else EnvSuite.GYMNASIUM
    kwargs = run_env_kwargs(algorithm, env_id, env_kwargs)
    env: dict[str, Any] = {"suite": suite, "id": env_id, "num_envs": num_envs, "kwargs": kwargs}
    if engine is not None:
        env["engine"] = engine
    return parse_spec(
        {
            "name": f"{algorithm}-{env_id}-seed{seed}",
            "algorithm": algorithm,
            "backend": backend,
            "env": env,
            "total_steps": steps,
            "seed": seed,
            "device": device,
            "hyperparameters": hyperparameters or {},
            "evaluation": {"every_steps": eval_every, "episodes": eval_episodes},
            "checkpoint": {"every_steps": steps},
        }
    )


class EchoHooks(MemoryHooks):
    """``MemoryHooks`` that also print each evaluation as it lands, with the seconds so far and
    the process's CPU seconds, so a long run that is cut off still leaves its curve. For MAPPO and
    IPPO the line also gives the policy's entropy at the last update (a collapsed policy's is near
    0: ``docs/algorithms.md``, "Policy collapse")."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()
        self.entropy: float | None = None

    def metrics(self, points: Sequence[MetricPoint]) -> None:
        super().metrics(points)
        for point in points:
            if point.name == "learner/entropy":
                self.entropy = point.value
            elif point.name == "eval/episode_return":
                wall = time.perf_counter() - self.start
                cpu = time.process_time() - self.cpu_start
                entropy = "" if self.entropy is None else f", entropy {self.entropy:.2f}"
                print(
                    f"  seed {self.seed} step {point.step}: {point.value:.1f}"
                    f"  ({wall:.0f} s, {cpu:.0f} s CPU{entropy})",
                    flush=True,
                )


def run_seed(spec: ExperimentSpec) -> tuple[list[tuple[int, float]], float, float]:
    """The eval curve, the wall seconds and the CPU seconds of one seed's run."""
    hooks = EchoHooks(spec.seed)
    train(spec, hooks)
    wall, cpu = time.perf_counter() - hooks.start, time.process_time() - hooks.cpu_start
    return hooks.series("eval/episode_return"), wall, cpu


def parse_overrides(items: list[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


TARGETS: dict[tuple[str, str], float] = {
    ("ddpg", "Pendulum-v1"): -200.0,
    ("mappo", "simple_spread_v3"): -18.1,
    ("ippo", "simple_spread_v3"): -18.1,
    ("maddpg", "simple_spread_v3"): -15.9,
    ("wqmix", "simple_spread_v3"): -12.6,
}
"""The mean eval return each algorithm must reach on its environment (the reference library's own
published scores, ``docs/algorithms.md``)."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--algorithm", default="ddpg")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--spec", type=Path, help="a spec JSON file (its seed is replaced)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--eval-every", type=int, default=2000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--target", type=float, default=None, help="default: TARGETS' entry, if there is one"
    )
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    args = parser.parse_args()

    curves, walls = [], []
    for seed in args.seeds:
        if args.spec is not None:
            data = json.loads(args.spec.read_text())
            data["seed"] = seed
            data.setdefault("hyperparameters", {}).update(parse_overrides(args.set))
            spec = parse_spec(data)
        else:
            spec = default_spec(
                args.algorithm, args.backend, args.env, seed=seed, steps=args.steps,
                num_envs=args.num_envs, eval_every=args.eval_every,
                eval_episodes=args.eval_episodes, hyperparameters=parse_overrides(args.set),
                device=args.device,
            )  # fmt: skip
        curve, wall, cpu = run_seed(spec)
        curves.append(curve)
        walls.append(wall)
        points = "  ".join(f"{s}:{v:.1f}" for s, v in curve)
        print(f"seed {seed}: {wall:6.1f} s ({cpu:.1f} s CPU)  {points}", flush=True)

    steps = [s for s, _ in curves[0]]
    means = np.mean([[v for _, v in c] for c in curves], axis=0)
    print(
        "mean over seeds: " + "  ".join(f"{s}:{m:.1f}" for s, m in zip(steps, means, strict=True))
    )
    print(f"wall time per seed: mean {np.mean(walls):.1f} s, total {np.sum(walls):.1f} s")
    target = args.target
    if target is None:
        target = TARGETS.get((spec.algorithm.value, spec.env.id))
    if target is None:
        print(f"final mean eval return {means[-1]:.1f} (no target for this algorithm and env)")
        return
    verdict = "reaches" if means[-1] >= target else "misses"
    print(f"final mean eval return {means[-1]:.1f} {verdict} the target {target}")


if __name__ == "__main__":
    main()
