"""MAPPO and IPPO training speed against the reference library (XuanCe 1.4.4), side by side.

    python3.11 -m venv /tmp/xcvenv
    /tmp/xcvenv/bin/pip install xuance==1.4.4 'pettingzoo[mpe]==1.24.3'
    python benchmarks/reference_train.py --xuance-python /tmp/xcvenv/bin/python \\
        --algorithms mappo ippo --steps 50000 --rounds 3

Each round trains every algorithm once in each library, alternately, each in a fresh process
pinned to one thread (``OMP_NUM_THREADS=1`` and the framework's own setting), and the table gives
the median over the rounds of the env steps per second of the training loop (rollouts and
updates) on simple_spread_v3 with continuous actions (XuanCe's default there; its discrete MPE
policies need other settings): for MARLForge ``learners.training.train`` with the spec's defaults
(the vector engine with 8 copies, PyTorch on the CPU) and evaluation pushed past the budget; for
XuanCe its own ``configs/<algorithm>/mpe/simple_spread_v3.yaml`` with 8 copies stepped in process
(``DummyVecMultiAgentEnv``; its default ``SubprocVecMultiAgentEnv`` would put each copy in a
process of its own on other cores), timing ``agent.train`` alone (the runner and its envs are
built before the clock starts; both libraries' imports come before it too, and so does the
one-off import of ``torch._dynamo`` that a process's first torch optimiser makes: XuanCe's agent
builds its optimisers before its clock, ours are built inside ``train``). XuanCe 1.4.4 imports
MPE from ``pettingzoo.mpe``, which PettingZoo 1.25 moved out (to mpe2), hence the pin.

The same file runs under both interpreters: the ``ours`` and ``xuance`` subcommands are the child
processes, and import nothing of the other library.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "simple_spread_v3"


def run_ours(algorithm: str, steps: int, num_envs: int) -> float:
    """MARLForge's training loop, env steps per second."""
    sys.path.insert(0, str(ROOT))
    import importlib

    from learners.admission.parse import parse_spec
    from learners.hooks import MemoryHooks
    from learners.training import train

    # Imported before the clock starts, as XuanCe's are (by get_runner).
    for module in (
        "learners.backends.torch.ppo",
        "learners.envs.vector",
        "learners.runners.on_policy",
    ):
        importlib.import_module(module)
    # A process's first torch optimiser imports torch._dynamo (about 800 modules, 1.5 s here).
    # XuanCe builds its agent, optimisers included, before its clock starts; ours are built
    # inside train(), so that one-off import is paid here, before the clock, for both to match.
    import torch

    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])

    spec = parse_spec(
        {
            "name": "bench",
            "algorithm": algorithm,
            "backend": "torch",
            "env": {
                "suite": "mpe",
                "id": ENV_ID,
                "num_envs": num_envs,
                "kwargs": {"continuous_actions": True},
            },
            "total_steps": steps,
            "seed": 0,
            "device": "cpu",
            "evaluation": {"every_steps": 10 * steps, "episodes": 1},
            "checkpoint": {"every_steps": 10 * steps, "keep_last": 1},
        }
    )
    start = time.perf_counter()
    train(spec, MemoryHooks())
    return steps / (time.perf_counter() - start)


def run_xuance(algorithm: str, steps: int, num_envs: int) -> float:
    """XuanCe's training loop (``agent.train``), env steps per second."""
    from types import SimpleNamespace

    import torch
    from xuance import get_runner

    torch.set_num_threads(1)
    scratch = tempfile.mkdtemp(prefix="xuance-bench-")
    overrides = SimpleNamespace(
        parallels=num_envs,
        vectorize="DummyVecMultiAgentEnv",
        running_steps=steps,
        eval_interval=10 * steps,
        device="cpu",
        log_dir=f"{scratch}/logs/",
        model_dir=f"{scratch}/models/",
        render=False,
    )
    runner = get_runner(algorithm, "mpe", ENV_ID, parser_args=overrides)
    start = time.perf_counter()
    runner.agent.train(steps // num_envs)
    return steps / (time.perf_counter() - start)


def child(python: str, library: str, algorithm: str, steps: int, num_envs: int) -> float:
    command = [python, __file__, library, "--algorithm", algorithm]
    command += ["--steps", str(steps), "--num-envs", str(num_envs)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    for name in ("ours", "xuance"):
        one = sub.add_parser(name)
        one.add_argument("--algorithm", required=True)
        one.add_argument("--steps", type=int, required=True)
        one.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--xuance-python", help="an interpreter with xuance==1.4.4 installed")
    parser.add_argument("--algorithms", nargs="+", default=["mappo", "ippo"])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.command == "ours":
        print(f"{run_ours(args.algorithm, args.steps, args.num_envs):.1f}")
        return
    if args.command == "xuance":
        print(f"{run_xuance(args.algorithm, args.steps, args.num_envs):.1f}")
        return
    if not args.xuance_python:
        parser.error("--xuance-python is required")
    rates: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for algorithm in args.algorithms:
            for library, python in (("ours", sys.executable), ("xuance", args.xuance_python)):
                rate = child(python, library, algorithm, args.steps, args.num_envs)
                rates.setdefault((library, algorithm), []).append(rate)
                print(f"{library} {algorithm}: {rate:,.0f} env-steps/s", file=sys.stderr)
    head = f"simple_spread_v3 (continuous actions), {args.num_envs} copies, {args.steps:,} steps"
    print(f"{head}, one thread, median of ")
    print(f"{args.rounds} alternating rounds (env steps per second of the training loop)\n")
    print("| algorithm | MARLForge | XuanCe 1.4.4 | MARLForge / XuanCe |")
    print("|---|---:|---:|---:|")
    for algorithm in args.algorithms:
        ours = statistics.median(rates["ours", algorithm])
        theirs = statistics.median(rates["xuance", algorithm])
        print(f"| {algorithm} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.1f}x |")


if __name__ == "__main__":
    main()
