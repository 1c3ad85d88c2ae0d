"""Each mixed mpe2 scenario's natural score, measured on its world state after every step.

The world state (positions, sizes, the goal landmark) is what the step's rewards are computed from;
``MPEVecEnv.step_observer`` hands it over before an ended episode is reset. Per episode:

- simple_tag: ``collisions_per_episode``, adversary–good-agent pairs in contact (centres closer than
  the sum of their radii, the scenario's own test) summed over the steps, as the adversaries' reward
  counts them;
- simple_adversary: ``adversary_distance_to_goal`` and ``agents_distance_to_goal`` (the closest good
  agent's, as the scenario's reward uses it), means over the steps;
- simple_push: ``agent_distance_to_goal`` (the good agent to its goal landmark) and
  ``adversary_distance_to_goal`` (the adversary to that same landmark), means over the steps.

A scenario without one (the cooperative simple_spread) scores ``{}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _distance(a: Any, b: Any) -> float:
    return float(np.sqrt(np.sum(np.square(a.state.p_pos - b.state.p_pos))))


def _tag_step(world: Any) -> dict[str, float]:
    adversaries = [a for a in world.agents if a.adversary]
    good = [a for a in world.agents if not a.adversary]
    # The scenario's own test: centres closer than the sum of the two radii.
    touching = sum(_distance(a, g) < a.size + g.size for a in adversaries for g in good)
    return {"collisions_per_episode": float(touching)}


def _adversary_step(world: Any) -> dict[str, float]:
    adversaries = [a for a in world.agents if a.adversary]
    good = [a for a in world.agents if not a.adversary]
    return {
        "adversary_distance_to_goal": float(np.mean([_distance(a, a.goal_a) for a in adversaries])),
        "agents_distance_to_goal": min(_distance(g, g.goal_a) for g in good),
    }


def _push_step(world: Any) -> dict[str, float]:
    adversaries = [a for a in world.agents if a.adversary]
    good = [a for a in world.agents if not a.adversary]
    return {
        "agent_distance_to_goal": float(np.mean([_distance(g, g.goal_a) for g in good])),
        # Every agent's goal_a is the good agent's goal landmark: the one the adversary guards.
        "adversary_distance_to_goal": float(np.mean([_distance(a, a.goal_a) for a in adversaries])),
    }


# Per scenario: the step's measures, and whether the episode's value is their sum (a count) or
# their mean (a per-step distance).
_SCORES: dict[str, tuple[Callable[[Any], dict[str, float]], bool]] = {
    "simple_tag_v3": (_tag_step, True),
    "simple_adversary_v3": (_adversary_step, False),
    "simple_push_v3": (_push_step, False),
}


class Scorer:
    """Accumulates a scenario's per-step measures copy by copy (``MPEVecEnv.step_observer``)."""

    def __init__(self, env_id: str, copies: int) -> None:
        self._measure, self._summed = _SCORES.get(env_id, (lambda _: {}, True))
        self._totals: list[dict[str, float]] = [{} for _ in range(copies)]
        self._steps = np.zeros(copies, np.int64)
        self.episodes: dict[int, dict[str, float]] = {}

    def observe(self, i: int, env: Any) -> None:
        for name, value in self._measure(env.unwrapped.world).items():
            self._totals[i][name] = self._totals[i].get(name, 0.0) + value
        self._steps[i] += 1

    def end(self, i: int, episode: int | None) -> None:
        """Copy ``i``'s episode ended; keep it as match episode ``episode`` (None: not counted)."""
        if episode is not None:
            scale = 1.0 if self._summed else 1.0 / int(self._steps[i])
            self.episodes[episode] = {k: v * scale for k, v in self._totals[i].items()}
        self._totals[i], self._steps[i] = {}, 0

    def score(self) -> dict[str, float]:
        """Each measure's mean over the kept episodes."""
        kept = [self.episodes[k] for k in sorted(self.episodes)]
        return {name: float(np.mean([e[name] for e in kept])) for name in kept[0]} if kept else {}
