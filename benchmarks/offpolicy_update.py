"""The cost of one off-policy update, alone: a learner's ``update`` on a fixed random replay batch,
timed over many calls on one thread, with the number of framework operations it runs.

    python benchmarks/offpolicy_update.py --algorithms wqmix maddpg --backend torch

The batch has the shapes the algorithm's defaults draw on simple_spread_v3 (8 copies' env,
``batch_size`` rows); the data is random (an update's cost does not depend on its values). Prints
the median milliseconds per update over ``--rounds`` rounds of ``--updates`` updates and, for
PyTorch, the operators one update dispatches (``torch.profiler``), the most called first.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import parse_overrides  # noqa: E402

from learners.buffers.replay import ReplayBatch, _row_shapes  # noqa: E402
from learners.enums import EnvSuite  # noqa: E402
from learners.envs.factory import make_vec_env  # noqa: E402
from learners.registry import entry  # noqa: E402
from learners.spec import EnvSpec  # noqa: E402


def random_batch(info: Any, rows: int, with_state: bool, seed: int = 0) -> ReplayBatch:
    """A replay batch of ``rows`` random transitions with the buffer's own shapes and dtypes."""
    rng = np.random.default_rng(seed)
    fields: dict[str, Any] = {}
    for name, (shape, dtype) in _row_shapes(info, with_state).items():
        full = (rows, *shape)
        if name == "actions" and dtype is np.int64:
            fields[name] = rng.integers(0, info.action_dim, full)
        elif name in ("agent_mask", "avail_actions", "next_avail_actions"):
            fields[name] = np.ones(full, dtype)
        elif name == "terminated":
            fields[name] = (rng.random(full) < 0.04).astype(dtype)
        else:
            fields[name] = rng.uniform(-1, 1, full).astype(dtype)
    return ReplayBatch(**fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=["wqmix", "maddpg"])
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--env", default="simple_spread_v3")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="hyperparameters (JSON values)"
    )
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    overrides = parse_overrides(args.set)
    for algorithm in args.algorithms:
        algo = entry(algorithm)
        spec = EnvSpec(suite=EnvSuite.MPE, id=args.env, num_envs=8)
        config = algo.config.resolve(spec.suite, spec.id, overrides)
        kwargs = {"continuous_actions": True} if algorithm in ("ddpg", "maddpg") else {}
        env = make_vec_env(spec.model_copy(update={"kwargs": kwargs}), seed=0)
        learner = algo.learner_class(args.backend)(config, env.info, "cpu", 0)
        batch = random_batch(env.info, config.batch_size, with_state=True)
        env.close()
        for _ in range(5):  # warm-up
            learner.update(batch)
        rounds = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            for _ in range(args.updates):
                learner.update(batch)
            rounds.append((time.perf_counter() - start) / args.updates * 1e3)
        print(
            f"{algorithm}/{args.backend}: {statistics.median(rounds):.2f} ms per update "
            f"(batch {config.batch_size}; rounds {', '.join(f'{r:.2f}' for r in rounds)})"
        )
        if args.backend == "torch":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                learner.update(batch)
            events = prof.key_averages()
            ops = Counter({e.key: e.count for e in events if e.key.startswith("aten::")})
            print(
                f"  {sum(ops.values())} aten operator calls per update; most called: "
                + ", ".join(f"{k.removeprefix('aten::')} {n}" for k, n in ops.most_common(8))
            )


if __name__ == "__main__":
    main()
