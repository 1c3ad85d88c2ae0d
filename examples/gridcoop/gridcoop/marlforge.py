"""The MARLForge suite of this package: what the ``marlforge.environments`` entry point names.

A suite declares, without building an env, its ids, the arguments a spec may set (with defaults,
from which their JSON types follow, and bounds), each id's agents, teams and groups, its action
kinds and time limit; MARLForge validates every spec against this and builds envs only on a
worker.
"""

from __future__ import annotations

from gridcoop.signal import parallel_env
from learners.enums import ActionKind
from learners.envs.suites.base import KwargRange, parameter
from learners.envs.suites.pettingzoo import PettingZooEnv, PettingZooSuite

SUITE = PettingZooSuite(
    "gridcoop",
    "Grid cooperation (example plugin)",
    "A scout that sees the goal and says where it is, once, and carriers on a line who must "
    "walk there: two groups of different spaces, one leaving the episode early.",
    {
        "signal_v0": PettingZooEnv(
            make=parallel_env,
            action_kinds=frozenset({ActionKind.DISCRETE}),
            agents=("scout_0", "carrier_0", "carrier_1"),
            # The scout and the carriers play on one team (their names alone would make two).
            teams={"scout": "agent", "carrier": "agent"},
            time_limit_kwarg="max_cycles",
            max_steps=10,
            parameters={
                "size": parameter("size", 5),
                "n_carriers": parameter("n_carriers", 2),
                "max_cycles": parameter("max_cycles", 10),
            },
            ranges=(
                KwargRange("size", 2, 32, "cells"),
                KwargRange("n_carriers", 1, 16, "carriers"),
                KwargRange("max_cycles", 2, 200, "steps per episode"),
            ),
            summary="1 scout (sees the goal, says it once, leaves) and 2 carriers on 5 cells.",
            copy_mib=0.1,
        )
    },
)
