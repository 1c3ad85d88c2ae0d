"""How soon two backends' WQMIX learners part when they make the same updates on the same data.

    python benchmarks/backend_drift.py --backend tensorflow --warmup-steps 100000 --updates 1000

Trains PyTorch's WQMIX (MPE defaults, simple_spread_v3, OW) for ``--warmup-steps`` env steps and
takes its final checkpoint: weights, Adam's moments and the replay buffer, so the updates below
run on what a training run holds (mostly greedy joint actions, real returns), not on random data.
Then, for OW and for CW in turn, it loads that state into a PyTorch learner and into
``--backend``'s and feeds both the same ``--updates`` batches, drawn from the checkpoint's replay
buffer by one generator. After 1, 10, 30, 100, 300, ... updates it prints

- the weights' drift: per tensor ``||a - b|| / ||b||`` over the live networks, the largest;
- how many updates so far had a ``weight_mean`` that differs between the two by more than 1e-4.
  Flipping one transition's weight moves it by ``(1 - alpha) / batch_size`` (3.5e-3 at the
  defaults), so such an update weighed at least one transition differently; float32 rounding alone
  stays far below 1e-4.

The parity suite holds one update to 1e-5 and ten to 1e-3 (``tests/learners/parity``); this shows
what the same arithmetic does over thousands, where a flipped comparison feeds back into the
weights. It measures divergence, not learning: ``benchmarks/learning.py`` is for returns.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learning import default_spec  # noqa: E402

from learners import checkpoint  # noqa: E402
from learners.algorithms.wqmix import WQMIXConfig  # noqa: E402
from learners.algorithms.wqmix_learner import LIVE  # noqa: E402
from learners.buffers.replay import ReplayBuffer  # noqa: E402
from learners.enums import Backend  # noqa: E402
from learners.hooks import MemoryHooks  # noqa: E402
from learners.registry import entry  # noqa: E402
from learners.spec import ExperimentSpec  # noqa: E402
from learners.training import train  # noqa: E402

REPORT_AT = (1, 10, 30, 100, 300, 1000, 3000, 10000)
WEIGHT_MEAN_FLIP = 1e-4


def warmup_checkpoint(spec: ExperimentSpec, directory: Path) -> Path:
    """Train ``spec`` (PyTorch's OW-QMIX); the path of its final checkpoint."""
    hooks = MemoryHooks(checkpoint_dir=directory)
    train(spec, hooks)
    path = hooks.checkpoints[-1][1]
    assert path is not None
    return path


def weight_drift(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest per-tensor relative distance between two states' live-network weights."""
    worst = 0.0
    for name, want in b.items():
        if name.split(".")[0] not in LIVE:
            continue
        want = np.asarray(want, np.float64)
        got = np.asarray(a[name], np.float64)
        scale = max(float(np.linalg.norm(want)), 1e-12)
        worst = max(worst, float(np.linalg.norm(got - want)) / scale)
    return worst


def drift(
    spec: ExperimentSpec,
    saved: tuple[checkpoint.Tensors, checkpoint.Manifest],
    backend: str,
    weighting: str,
    updates: int,
) -> None:
    """PyTorch's and ``backend``'s learners from ``saved`` (the tensors and manifest of the
    checkpoint ``spec``'s run took), with ``weighting``, through ``updates`` identical updates;
    prints the drift as it goes."""
    tensors, manifest = saved
    info = checkpoint.env_info_from_json(manifest.env)
    config = spec.config().model_copy(update={"weighting": weighting})
    assert isinstance(config, WQMIXConfig)
    algo = entry("wqmix")
    pair = (Backend.TORCH, Backend(backend))
    learners = [algo.learner_class(b)(config, info, "cpu", spec.seed) for b in pair]
    for learner in learners:
        learner.load_state(tensors)
    buffer = ReplayBuffer(info, config.buffer_size, with_state=True)
    buffer.load_state(tensors)
    sampler = np.random.default_rng(spec.seed)
    flips = 0
    print(f"{weighting.upper()}: torch against {backend}, {buffer.size} stored transitions")
    for k in range(1, updates + 1):
        batch = buffer.sample(config.batch_size, sampler)
        stats = [learner.update(batch).as_dict() for learner in learners]
        if abs(stats[0]["weight_mean"] - stats[1]["weight_mean"]) > WEIGHT_MEAN_FLIP:
            flips += 1
        if k in REPORT_AT or k == updates:
            states = [learner.state() for learner in learners]
            print(
                f"  after {k:5d} updates: weights' drift {weight_drift(states[1], states[0]):.2e},"
                f" updates with a different weight_mean {flips} ({flips / k:.1%}),"
                f" loss {stats[0]['loss']:.4f} / {stats[1]['loss']:.4f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="tensorflow", choices=["tensorflow", "mindspore"])
    parser.add_argument("--warmup-steps", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    steps = args.warmup_steps
    spec = default_spec(
        "wqmix", "torch", "simple_spread_v3", seed=args.seed, steps=steps, num_envs=8,
        eval_every=steps, eval_episodes=1,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        saved = checkpoint.read(warmup_checkpoint(spec, Path(directory)))
    for weighting in ("ow", "cw"):
        drift(spec, saved, args.backend, weighting, args.updates)


if __name__ == "__main__":
    main()
