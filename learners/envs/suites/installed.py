"""The suites this process can name: the built-in ones and those that installed packages register
under the ``marlforge.environments`` entry-point group.

An entry point names a ``Suite`` instance (or a class, which is instantiated with no arguments):

    [project.entry-points."marlforge.environments"]
    gridcoop = "gridcoop.marlforge:SUITE"

A plugin that fails to load is left out, with the reason kept in ``plugin_errors()`` (the API's
``GET /v1/environments`` shows it to the operator); a plugin that names a built-in suite, or a
suite another plugin already took, is left out the same way. Nothing a spec says is imported:
specs name suites by the names these objects declare.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from typing import Any

from learners.envs.suites.base import Suite
from learners.envs.suites.gymnasium import GymnasiumSuite
from learners.envs.suites.mamujoco import MAMUJOCO
from learners.envs.suites.mpe import MPESuite
from learners.envs.suites.sisl import SISL
from learners.envs.suites.tuple_gym import LBF, RWARE

ENTRY_POINT_GROUP = "marlforge.environments"
SUITE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
"""What a suite may be called (and so what a spec's ``env.suite`` may say)."""


def builtin_suites() -> tuple[Suite, ...]:
    """The suites MARLForge ships, in the order they are listed."""
    return (GymnasiumSuite(), MPESuite(), SISL, MAMUJOCO, LBF, RWARE)


def _load(entry_point: importlib.metadata.EntryPoint) -> Suite:
    loaded: Any = entry_point.load()
    suite = loaded() if isinstance(loaded, type) else loaded
    if not isinstance(suite, Suite):
        raise TypeError(f"{entry_point.value} is not a learners.envs.suites.base.Suite")
    if not isinstance(getattr(suite, "name", None), str) or not SUITE_NAME.match(suite.name):
        raise ValueError(f"{entry_point.value} has no valid name (lower case, digits and _)")
    return suite


@functools.cache
def _installed() -> tuple[dict[str, Suite], dict[str, str]]:
    suites = {s.name: s for s in builtin_suites()}
    errors: dict[str, str] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            suite = _load(entry_point)
        except Exception as exc:  # a broken plugin must not take the service down with it
            errors[entry_point.name] = f"{type(exc).__name__}: {exc}"
            continue
        if suite.name in suites:
            errors[entry_point.name] = f"the suite name {suite.name!r} is already taken"
            continue
        suites[suite.name] = suite
    return suites, errors


def suites() -> tuple[Suite, ...]:
    """Every suite this process can name, built-in first."""
    return tuple(_installed()[0].values())


def suite_names() -> tuple[str, ...]:
    return tuple(_installed()[0])


def suite(name: str) -> Suite:
    """The suite called ``name``; ``KeyError`` if none is installed."""
    return _installed()[0][name]


def buildable_suites() -> tuple[str, ...]:
    """The suites whose envs this host can build (every module they need is installed)."""
    return tuple(s.name for s in suites() if not s.missing())


def plugin_errors() -> dict[str, str]:
    """Entry points that did not load, with the reason."""
    return dict(_installed()[1])
