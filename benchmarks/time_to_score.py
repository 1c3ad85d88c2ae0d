"""Wall-clock time to the reference library's own published 1M-step simple_spread score.

    python benchmarks/time_to_score.py --xuance-python /tmp/xcvenv/bin/python \\
        --algorithms mappo maddpg wqmix --seeds 0 1 2

The targets are XuanCe's published scores on simple_spread_v3 after 1M env steps (MAPPO -19.8,
MADDPG -26.7, OW-QMIX -16.3; issue #22). **Ours**: ``learners.training.train`` with the
algorithm's defaults (what a spec gets: the vector engine and its MPE copies, PyTorch on the CPU,
one thread), evaluated on 10 episodes every ``--eval-every`` env steps, stopped at the first
evaluation that reaches the target; the time is taken there, evaluations included, from just
before ``train`` (imports and torch's one-off optimiser import before the clock, as in
``reference_train.py``). **The reference**: its published score is its 1M-step one, so its time
to that score is the time its own training loop takes for 1M env steps here: ``agent.train`` of
its own ``configs/<algorithm>/mpe/simple_spread_v3.yaml`` (its 16 copies stepped in process, one
thread) timed over ``--xuance-steps`` env steps by ``reference_train.py xuance`` and taken to 1M at
that rate. The reference is not scored here; what it reaches at 1M is its own published figure.

``--set key=value`` overrides our hyperparameters (JSON values), e.g. ``updates_per_step=0.0625``;
``--num-envs`` our env copies.
Each run is a fresh process pinned to one thread; the reference's rate is measured between
our seeds' runs, so that a busy machine slows both alike.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "simple_spread_v3"
# XuanCe's published simple_spread_v3 returns after 1M env steps.
TARGETS = {"mappo": -19.8, "maddpg": -26.7, "wqmix": -16.3}
REFERENCE_STEPS = 1_000_000


def run_ours(
    algorithm: str,
    seed: int,
    target: float,
    eval_every: int,
    max_steps: int,
    overrides: dict[str, Any] | None = None,
    num_envs: int | None = None,
) -> dict[str, Any]:
    """Train until an evaluation reaches ``target``; the step, seconds and CPU seconds there."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch
    from learning import default_spec

    from learners.enums import Algorithm
    from learners.hooks import MemoryHooks, MetricPoint
    from learners.registry import entry
    from learners.training import train

    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # see reference_train.run_ours

    class UntilTarget(MemoryHooks):
        def __init__(self) -> None:
            super().__init__()
            self.reached: dict[str, Any] | None = None
            self.start = time.perf_counter()
            self.cpu_start = time.process_time()

        def metrics(self, points: Sequence[MetricPoint]) -> None:
            super().metrics(points)
            for point in points:
                first = point.name == "eval/episode_return" and self.reached is None
                if first and point.value >= target:
                    self.reached = {
                        "step": point.step,
                        "return": point.value,
                        "seconds": time.perf_counter() - self.start,
                        "cpu_seconds": time.process_time() - self.cpu_start,
                    }

        def should_stop(self) -> bool:
            return self.reached is not None

    if num_envs is None:
        num_envs = entry(Algorithm(algorithm)).env_defaults_for("mpe", ENV_ID).get("num_envs", 1)
    spec = default_spec(
        algorithm, "torch", ENV_ID, seed=seed, steps=max_steps, num_envs=num_envs,
        eval_every=eval_every, eval_episodes=10, hyperparameters=overrides,
    )  # fmt: skip
    hooks = UntilTarget()
    train(spec, hooks)
    evals = hooks.series("eval/episode_return")
    return {"reached": hooks.reached, "evals": evals, "num_envs": num_envs}


def child(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=7200, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    ours = sub.add_parser("ours")
    ours.add_argument("--algorithm", required=True)
    ours.add_argument("--seed", type=int, required=True)
    ours.add_argument("--eval-every", type=int, required=True)
    ours.add_argument("--max-steps", type=int, required=True)
    ours.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    ours.add_argument("--num-envs", type=int)
    parser.add_argument("--xuance-python", help="an interpreter with xuance==1.4.4 installed")
    parser.add_argument("--algorithms", nargs="+", default=list(TARGETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument("--xuance-steps", type=int, default=20_000)
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="our hyperparameter overrides"
    )
    parser.add_argument(
        "--xuance-num-envs", type=int, default=16, help="its configs' parallels for all three"
    )
    parser.add_argument(
        "--num-envs", type=int, help="our env copies (default: the algorithm's MPE default)"
    )
    args = parser.parse_args()
    if args.command == "ours":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from learning import parse_overrides

        result = run_ours(
            args.algorithm, args.seed, TARGETS[args.algorithm], args.eval_every, args.max_steps,
            parse_overrides(args.set), args.num_envs,
        )  # fmt: skip
        print(json.dumps(result))
        return
    if not args.xuance_python:
        parser.error("--xuance-python is required")

    here = [sys.executable, __file__]
    reference = [args.xuance_python, str(ROOT / "benchmarks" / "reference_train.py"), "xuance"]
    rows = []
    for algorithm in args.algorithms:
        runs, rates = [], []
        for seed in args.seeds:
            command = [*here, "ours", "--algorithm", algorithm, "--seed", str(seed)]
            command += ["--eval-every", str(args.eval_every), "--max-steps", str(args.max_steps)]
            command += ["--set", *args.set] if args.set else []
            command += ["--num-envs", str(args.num_envs)] if args.num_envs else []
            run = json.loads(child(command))
            runs.append(run)
            reached = run["reached"]
            text = "not reached" if reached is None else (
                f"{reached['return']:.1f} at {reached['step']:,} steps, {reached['seconds']:.0f} s"
                f" ({reached['cpu_seconds']:.0f} s CPU)"
            )  # fmt: skip
            print(f"{algorithm} seed {seed}: {text}", flush=True)
            rate = float(
                child(
                    [*reference, "--algorithm", algorithm, "--steps", str(args.xuance_steps)]
                    + ["--num-envs", str(args.xuance_num_envs)]
                )
            )
            rates.append(rate)
            print(f"  reference {algorithm}: {rate:,.0f} env steps/s", flush=True)
        reached = [r["reached"] for r in runs if r["reached"] is not None]
        reference_seconds = REFERENCE_STEPS / statistics.median(rates)
        ours_steps = statistics.median(r["step"] for r in reached) if reached else None
        ours_seconds = statistics.median(r["seconds"] for r in reached) if reached else None
        rows.append(
            (algorithm, len(reached), len(runs), ours_steps, ours_seconds,
             statistics.median(rates), reference_seconds)
        )  # fmt: skip
    print()
    print(
        "| algorithm | target | ours: reached | ours: steps (median) | ours: seconds (median) "
        "| reference: env steps/s | reference: seconds to 1M | reference / ours |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for algorithm, hit, total, steps, seconds, rate, ref_seconds in rows:
        ratio = (
            "-"
            if not seconds
            else f"{ref_seconds / seconds:.{0 if ref_seconds >= 10 * seconds else 1}f}x"
        )
        steps_text = f"{steps:,.0f}" if steps else "-"
        seconds_text = f"{seconds:.0f}" if seconds else "-"
        print(
            f"| {algorithm} | {TARGETS[algorithm]} | {hit}/{total} | {steps_text} | {seconds_text} "
            f"| {rate:,.0f} | {ref_seconds:,.0f} | {ratio} |"
        )


if __name__ == "__main__":
    main()
