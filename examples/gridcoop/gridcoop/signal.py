"""``signal_v0``: a scout that sees where the goal is and says so once, and carriers on a line who
hear it and must walk to the goal.

- The **scout** (group ``scout``) observes the goal as a one-hot of ``size`` cells and acts once,
  with ``Discrete(size)``: the symbol it says. It then leaves the episode.
- Each **carrier** (group ``carrier``) observes its own cell (one-hot), the symbol it heard
  (one-hot, zeros before the scout spoke) and the time left, and moves with ``Discrete(3)``:
  left, stay, right.
- Everyone is on one team and shares the reward: minus the carriers' mean distance to the goal,
  divided by the line's length, every step. An episode lasts ``max_cycles`` steps.

Two groups with different observation sizes (``size`` against ``2 * size + 1``) and action sizes
(``size`` against 3), and an agent that leaves early: what the MARLForge adapter has to handle. It
declares no global state (no ``state_space``): MARLForge then joins the agents' observations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class SignalEnv(ParallelEnv):  # type: ignore[misc]
    metadata = {"name": "signal_v0", "render_modes": ["rgb_array"]}

    def __init__(
        self,
        size: int = 5,
        n_carriers: int = 2,
        max_cycles: int = 10,
        render_mode: str | None = None,
    ) -> None:
        if size < 2 or n_carriers < 1 or max_cycles < 2:
            raise ValueError("size >= 2, n_carriers >= 1 and max_cycles >= 2 are needed")
        self.size, self.max_cycles, self.render_mode = size, max_cycles, render_mode
        self.possible_agents = ["scout_0"] + [f"carrier_{i}" for i in range(n_carriers)]
        self.agents: list[str] = []
        self._obs = {
            "scout_0": spaces.Box(0.0, 1.0, (size,), np.float32),
            **{
                a: spaces.Box(0.0, 1.0, (2 * size + 1,), np.float32)
                for a in self.possible_agents[1:]
            },
        }
        self._act = {
            "scout_0": spaces.Discrete(size),
            **{a: spaces.Discrete(3) for a in self.possible_agents[1:]},
        }
        self._rng = np.random.default_rng()
        self._goal = 0
        self._heard = -1
        self._t = 0
        self._cells = np.zeros(n_carriers, np.int64)

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._obs[agent]

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._act[agent]

    def _observe(self, agent: str) -> np.ndarray:
        if agent == "scout_0":
            return np.eye(self.size, dtype=np.float32)[self._goal]
        i = int(agent.rsplit("_", 1)[1])
        heard = np.zeros(self.size, np.float32)
        if self._heard >= 0:
            heard[self._heard] = 1.0
        where = np.eye(self.size, dtype=np.float32)[self._cells[i]]
        left = np.array([1.0 - self._t / self.max_cycles], np.float32)
        return np.concatenate([where, heard, left])

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], ...]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._goal = int(self._rng.integers(self.size))
        self._cells = self._rng.integers(self.size, size=len(self._cells))
        self._heard, self._t = -1, 0
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        if "scout_0" in self.agents:
            self._heard = int(actions["scout_0"])
        for i, agent in enumerate(self.possible_agents[1:]):
            move = int(actions[agent]) - 1
            self._cells[i] = int(np.clip(self._cells[i] + move, 0, self.size - 1))
        self._t += 1
        reward = -float(np.mean(np.abs(self._cells - self._goal))) / (self.size - 1)
        acting = list(self.agents)
        rewards = {a: reward for a in acting}
        timed_out = self._t >= self.max_cycles
        terminations = {a: a == "scout_0" for a in acting}  # the scout leaves once it has spoken
        truncations = {a: timed_out for a in acting}
        self.agents = [] if timed_out else [a for a in acting if a != "scout_0"]
        observations = {a: self._observe(a) for a in acting}
        return observations, rewards, terminations, truncations, {a: {} for a in acting}

    def render(self) -> np.ndarray:
        frame = np.zeros((20, 20 * self.size, 3), np.uint8)
        frame[:, 20 * self._goal : 20 * self._goal + 20, 1] = 255
        for cell in self._cells:
            frame[5:15, 20 * cell + 5 : 20 * cell + 15, 0] = 255
        return frame

    def close(self) -> None:
        pass


def parallel_env(**kwargs: Any) -> SignalEnv:
    return SignalEnv(**kwargs)
