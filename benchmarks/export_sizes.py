"""How much of a checkpoint the policy-only export keeps, per algorithm.

    python benchmarks/export_sizes.py --steps 10000

Trains each algorithm with the PyTorch backend and the registry's defaults (its own networks,
buffer sizes and env settings) on a small env for ``--steps`` env steps, takes the last checkpoint
and its policy-only export (``learners.exports.export_policy``), and prints both sizes. An
off-policy checkpoint holds its replay buffer as far as it is filled (up to ``buffer_size``), so
its share shrinks as a run goes on; an on-policy one holds networks and Adam's moments alone.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learners.admission.parse import parse_spec  # noqa: E402
from learners.enums import Algorithm  # noqa: E402
from learners.exports import export_policy  # noqa: E402
from learners.hooks import MemoryHooks  # noqa: E402
from learners.training import train  # noqa: E402
from workers.threads import limit_threads  # noqa: E402

ENVS: dict[Algorithm, dict[str, Any]] = {
    Algorithm.DDPG: {"suite": "gymnasium", "id": "Pendulum-v1"},
    Algorithm.MADDPG: {"suite": "mpe", "id": "simple_spread_v3"},
    Algorithm.IPPO: {"suite": "mpe", "id": "simple_spread_v3"},
    Algorithm.MAPPO: {"suite": "mpe", "id": "simple_spread_v3"},
    Algorithm.WQMIX: {"suite": "mpe", "id": "simple_spread_v3"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    limit_threads(1)
    print(f"{'algorithm':<10} {'env':<18} {'checkpoint':>12} {'export':>10} {'share':>7}")
    for algorithm, env in ENVS.items():
        spec = parse_spec(
            {
                "name": "export-sizes",
                "algorithm": algorithm,
                "backend": "torch",
                "env": env,
                "total_steps": args.steps,
                "evaluation": {"every_steps": args.steps, "episodes": 1},
                "checkpoint": {"every_steps": args.steps, "keep_last": 1},
            }
        )
        with tempfile.TemporaryDirectory() as folder:
            hooks = MemoryHooks(checkpoint_dir=Path(folder))
            train(spec, hooks)
            source = hooks.checkpoints[-1][1]
            assert source is not None
            made = export_policy(source, Path(folder) / "policy.safetensors")
        share = made.bytes / made.source_bytes
        print(
            f"{algorithm.value:<10} {env['id']:<18} {made.source_bytes:>12,} {made.bytes:>10,} "
            f"{share:>7.1%}"
        )


if __name__ == "__main__":
    main()
