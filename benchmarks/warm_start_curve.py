"""A warm-started run's learning curve beside a fresh one's (``spec.init``, issue #52).

    python benchmarks/warm_start_curve.py                      # DDPG, Pendulum g=10 -> g=12
    python benchmarks/warm_start_curve.py --parent-steps 20000 --steps 10000 \
        --seeds 300 301 302 303 304 --g 12.0 --eval-every 1000

A parent run (seed 0) trains DDPG on Pendulum-v1 with the default gravity; then every seed trains
on a heavier pendulum (``--g``) three ways, each for ``--steps``: fresh, warm-started from the
parent's last checkpoint with ``what: policy``, and with ``what: all``. It prints, at every
evaluation step, the interquartile mean of the seeds' evaluation returns with its 95% percentile
bootstrap interval (``core.sweeps.stats``), per arm. The warm starts run through ``train``'s
``init_from`` exactly as a worker calls it. The seeds given are the study's own: none of them
was used to choose a setting here. One thread, one run at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MARLFORGE_CPU_THREADS", "1")  # one thread per op: the runs' own setting
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy or a framework starts its pool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.sweeps.stats import bootstrap_ci, iqm  # noqa: E402
from learners.admission.parse import parse_spec  # noqa: E402
from learners.hooks import MemoryHooks  # noqa: E402
from learners.spec import ExperimentSpec  # noqa: E402
from learners.training import train  # noqa: E402

PARENT_ID = "0" * 26  # the id a stored spec would carry; train() reads the file it is given
ARMS = ("fresh", "policy", "all")


def _spec(seed: int, steps: int, eval_every: int, g: float | None, arm: str) -> ExperimentSpec:
    data: dict[str, Any] = {
        "name": f"pendulum-{arm}-s{seed}",
        "algorithm": "ddpg",
        "backend": "torch",
        "env": {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 1,
                "kwargs": {} if g is None else {"g": g}},
        "total_steps": steps,
        "seed": seed,
        "device": "cpu",
        "evaluation": {"every_steps": eval_every, "episodes": 10},
        "checkpoint": {"every_steps": steps, "keep_last": 1},
    }  # fmt: skip
    if arm != "fresh":
        data["init"] = {"experiment_id": PARENT_ID, "checkpoint_id": PARENT_ID, "what": arm}
    return parse_spec(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parent-steps", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[300, 301, 302, 303, 304])
    parser.add_argument("--g", type=float, default=12.0, help="the children's gravity")
    parser.add_argument("--eval-every", type=int, default=1000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        parent_hooks = MemoryHooks(checkpoint_dir=Path(folder))
        train(_spec(0, args.parent_steps, args.eval_every, None, "fresh"), parent_hooks)
        parent = parent_hooks.checkpoints[-1][1]
        assert parent is not None
        final = parent_hooks.series("eval/episode_return")[-1]
        print(
            f"parent: DDPG on Pendulum-v1 (g=10), seed 0, {args.parent_steps:,} steps: eval "
            f"return {final[1]:.1f} at step {final[0]:,} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        curves: dict[str, list[list[tuple[int, float]]]] = {arm: [] for arm in ARMS}
        for seed in args.seeds:
            for arm in ARMS:
                start = time.perf_counter()
                hooks = MemoryHooks()
                spec = _spec(seed, args.steps, args.eval_every, args.g, arm)
                train(spec, hooks, init_from=None if arm == "fresh" else parent)
                curve = hooks.series("eval/episode_return")
                curves[arm].append(curve)
                print(
                    f"  g={args.g} seed {seed} {arm:>6}: "
                    + " ".join(f"{v:.0f}" for _, v in curve)
                    + f"  ({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
    print(f"\nIQM of {len(args.seeds)} seeds [95% bootstrap interval], eval return on g={args.g}:")
    print("| step | " + " | ".join(ARMS) + " |")
    print("|---|" + "---|" * len(ARMS))
    steps = [s for s, _ in curves["fresh"][0]]
    for i, step in enumerate(steps):
        cells = []
        for arm in ARMS:
            values = [curve[i][1] for curve in curves[arm]]
            ci = bootstrap_ci(values)
            cells.append(f"{float(iqm(values)):.1f} [{ci.low:.1f}, {ci.high:.1f}]")
        print(f"| {step:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
