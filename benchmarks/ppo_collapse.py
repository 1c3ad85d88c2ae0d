"""Watch a MAPPO/IPPO run on simple_spread from the inside, one line per update, to see a policy
collapse happen (``docs/algorithms.md``, "Policy collapse: the mechanism").

    python benchmarks/ppo_collapse.py --algorithm mappo --seed 3 --steps 1000000 \
        --stop-at 300000 --set gamma=0.99 rollout_length=50 learning_rate=0.002

PyTorch backend, defaults of the algorithm on MPE unless ``--set`` overrides them. Per update it
prints the env step, the rollout's mean reward per agent-step, the learner's stats (entropy,
approx_kl, clip fraction, gradient norm, explained variance), the value normaliser's mean and std,
and what the rollout's observations looked like: the agents' mean distance from the origin and
from the nearest landmark, the largest observation entry, the actor's mean largest action
probability and the mean spread of its logits (max - min), and the correlation over the rollout's
samples between an agent's distance from the origin and its policy's largest probability; then
the critic's mean value (reward units) of the agent-steps within 2 of the origin and beyond, the
mean value targets of both, the range of the targets and the share above 0 (no simple_spread
return is). ``--json`` writes the same rows to a file. ``--time-limit-terminal`` is an experiment:
the targets are built as if the time limit were the episode's true end (no bootstrap there).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from learning import default_spec, parse_overrides  # noqa: E402

import learners.algorithms.ppo_learner as ppo_learner  # noqa: E402
from learners.algorithms.ppo import rollout_targets  # noqa: E402
from learners.hooks import MemoryHooks, MetricPoint  # noqa: E402
from learners.training import train  # noqa: E402

ROWS: list[dict[str, Any]] = []
TARGETS: dict[str, float] = {}
TIME_LIMIT_TERMINAL = "--time-limit-terminal" in sys.argv


def far_from_origin(obs: Any) -> Any:
    """Which agent-steps are more than 2 from the origin (simple_spread draws agents and landmarks
    within 1; the observation's features 2:4 are the agent's position)."""
    return np.linalg.norm(obs[..., 2:4], axis=-1) > 2.0


def watched_targets(config: Any, buffer: Any, normalizer: Any) -> Any:
    """``rollout_targets``, noting the critic's values and the returns it trains towards (reward
    units), on the samples whose agent is far from the origin (over 2) and on the rest."""
    if TIME_LIMIT_TERMINAL:
        buffer.terminated |= buffer.episode_end
    values = normalizer.denormalize(buffer.values) if config.value_norm else buffer.values
    targets = rollout_targets(config, buffer, normalizer)
    returns = targets.returns
    if config.value_norm:
        returns = normalizer.denormalize(returns)
    far = far_from_origin(buffer.obs)
    TARGETS.clear()
    TARGETS.update(
        v_near=float(values[~far].mean()),
        v_far=float(values[far].mean()) if far.any() else float("nan"),
        ret_near=float(returns[~far].mean()),
        ret_far=float(returns[far].mean()) if far.any() else float("nan"),
        ret_max=float(returns.max()),
        ret_min=float(returns.min()),
        positive=float((returns > 0).mean()),
    )
    return targets


ppo_learner.rollout_targets = watched_targets  # type: ignore[attr-defined]  # PPOLearner.update calls it


def rollout_view(learner: Any, buffer: Any) -> dict[str, float]:
    """What the rollout's observations and the actor's outputs on them looked like."""
    obs = buffer.obs[: buffer.length]
    num_agents = obs.shape[2]
    pos = obs[..., 2:4]
    landmarks = obs[..., 4 : 4 + 2 * num_agents].reshape(*obs.shape[:3], num_agents, 2)
    from_origin = np.linalg.norm(pos, axis=-1)
    nearest = np.linalg.norm(landmarks, axis=-1).min(axis=-1)
    with torch.no_grad():
        logits = learner.actor(torch.as_tensor(obs))[0].numpy().astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = probs.max(-1)
    corr = float(np.corrcoef(from_origin.ravel(), top.ravel())[0, 1])
    return {
        "from_origin": float(from_origin.mean()),
        "far_fraction": float((from_origin > 2.0).mean()),
        "nearest_landmark": float(nearest.mean()),
        "max_abs_obs": float(np.abs(obs).max()),
        "top_prob": float(top.mean()),
        "logit_spread": float((logits.max(-1) - logits.min(-1)).mean()),
        "corr_origin_top": corr,
        "reward": float(buffer.rewards[: buffer.length].mean()),
    }


class Watch(MemoryHooks):
    def __init__(self, stop_at: int | None) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.evals: list[tuple[int, float]] = []

    def should_stop(self) -> bool:
        step = self.progress_steps[-1] if self.progress_steps else 0
        return self.stop_at is not None and step >= self.stop_at

    def metrics(self, points: Sequence[MetricPoint]) -> None:
        super().metrics(points)
        for point in points:
            if point.name == "eval/episode_return":
                self.evals.append((point.step, point.value))
                print(f"# eval at {point.step}: {point.value:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithm", default="mappo", choices=["mappo", "ippo"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=150_000)
    parser.add_argument(
        "--stop-at", type=int, help="stop at this env step (the schedule still spans --steps)"
    )
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=50_000)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--every", type=int, default=1, help="print every k-th update")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--time-limit-terminal", action="store_true",
        help="experiment: no bootstrap where an episode ends by its time limit",
    )  # fmt: skip
    args = parser.parse_args()

    original_update = ppo_learner.PPOLearner.update

    def update(learner: Any, buf: Any) -> Any:
        view = rollout_view(learner, buf)
        stats = original_update(learner, buf)
        row = {
            "step": learner.updates * buf.length * buf.obs.shape[1],
            **view,
            **stats.as_dict(),
            **TARGETS,
            "vn_mean": float(learner.normalizer.mean),
            "vn_std": learner.normalizer.std,
        }
        ROWS.append(row)
        if len(ROWS) % args.every == 0:
            print(
                f"{row['step']:>8} r {row['reward']:6.3f} H {row['entropy']:.3f}"
                f" kl {row['approx_kl']:.4f} clip {row['clip_fraction']:.3f}"
                f" g {row['grad_norm']:6.2f} ev {row['explained_variance']:5.2f}"
                f" vn {row['vn_mean']:6.2f}/{row['vn_std']:5.2f}"
                f" | origin {row['from_origin']:5.2f} far {row['far_fraction']:.2f}"
                f" lm {row['nearest_landmark']:5.2f} |obs| {row['max_abs_obs']:6.1f}"
                f" top {row['top_prob']:.3f} spread {row['logit_spread']:6.2f}"
                f" corr {row['corr_origin_top']:5.2f}"
                f" | V near {row['v_near']:6.1f} far {row['v_far']:6.1f}"
                f" R near {row['ret_near']:6.1f} far {row['ret_far']:6.1f}"
                f" R in [{row['ret_min']:.0f}, {row['ret_max']:.0f}]"
                f" >0 {row['positive']:.2f}",
                flush=True,
            )
        return stats

    ppo_learner.PPOLearner.update = update  # type: ignore[method-assign,assignment]
    spec = default_spec(
        args.algorithm, "torch", "simple_spread_v3", seed=args.seed, steps=args.steps,
        num_envs=args.num_envs, eval_every=args.eval_every, eval_episodes=20,
        hyperparameters=parse_overrides(args.set),
    )  # fmt: skip
    hooks = Watch(args.stop_at)
    train(spec, hooks)
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": ROWS, "evals": hooks.evals}))


if __name__ == "__main__":
    main()
