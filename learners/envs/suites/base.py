"""The environment interface: what a suite of environments tells MARLForge, and how it builds them.

A suite is a small adapter with one job. The API process asks it, without building an env, which
ids it offers, which constructor arguments each id takes (with their defaults, from which the type
a spec must give follows, and their bounds), which arguments a spec may never set, each id's teams
and groups, its action kinds, and what one copy costs in memory; a worker asks it for a batched
``VecEnv``. Only ``sizes`` may build a throwaway copy (mpe2 and PettingZoo envs size their
observations in code of their own); admission calls it only after the spec's counts passed their
bounds.

The built-in suites live beside this module; an operator adds one by installing a package that
registers a ``Suite`` under the ``marlforge.environments`` entry-point group
(``learners.envs.suites.installed``, ``docs/environments.md``). A spec names only a suite and an id
a suite declares; never a module, a path or a callable.
"""

from __future__ import annotations

import abc
import importlib.util
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from learners.enums import ActionKind
from learners.envs.base import VecEnv
from learners.envs.shapes import EnvShape

RESERVED_KWARGS: dict[str, str] = {
    "render_mode": "rendering is chosen by MARLForge, not by the spec",
    "xml_file": "a model file path cannot be set from a spec",
    "model_path": "a model file path cannot be set from a spec",
    "observation_space": "the observation space is fixed by the environment",
}
"""Constructor arguments no spec may set in any suite: the adapter owns rendering, and a file path
would let a spec make the worker read any file on its disk. A suite adds its own."""


@dataclass(frozen=True)
class KwargRange:
    """An integer constructor argument's allowed range; ``null`` passes where it is the default
    (mpe2's neighbour counts: full observability)."""

    kwarg: str
    low: int
    high: int
    unit: str
    """What the number counts, for the reason: ``agents``, ``steps per episode``."""


class EnvFactory(Protocol):
    """Builds ``num_envs`` in-process copies starting at run copy ``first_copy`` (picklable, so
    copies can step in worker processes)."""

    def __call__(self, num_envs: int, *, first_copy: int) -> VecEnv: ...


@dataclass(frozen=True)
class EnvEntry:
    """One id of a suite, as listed (``GET /v1/environments``)."""

    id: str
    teams: tuple[str, ...]
    """Each agent's team with the default arguments, in agent order."""
    groups: tuple[str, ...]
    """Each agent's group (who shares spaces) with the default arguments, in agent order."""
    action_kinds: frozenset[ActionKind]
    """The action kinds the id can act in with some arguments."""
    summary: str = ""


class Suite(abc.ABC):
    """A family of environments behind one adapter. Subclasses set the class attributes and
    implement the abstract methods; the defaults of the rest suit most suites."""

    name: str
    """What a spec's ``env.suite`` says: lower case, digits and ``_``."""
    title: str
    summary: str
    multi_agent: bool = True
    """False for single-agent suites (Gymnasium): single-agent algorithms train there, and
    multi-agent ones everywhere else."""
    reserved: Mapping[str, str] = RESERVED_KWARGS
    """Constructor arguments a spec may not set, with the reason."""
    max_envs: int = 256
    """The most copies a spec may ask for (copies step one after another)."""
    requires: tuple[str, ...] = ()
    """The modules its envs need: a host where one is missing cannot build them (a worker then
    does not serve the suite, ``missing()``)."""

    def missing(self) -> tuple[str, ...]:
        """The modules of ``requires`` this host lacks, found without importing them."""
        return tuple(m for m in self.requires if not _findable(m))

    @abc.abstractmethod
    def ids(self) -> tuple[str, ...]:
        """The env ids this suite offers."""

    @abc.abstractmethod
    def entry(self, env_id: str) -> EnvEntry:
        """The listing of ``env_id`` (one of ``ids()``)."""

    @abc.abstractmethod
    def parameters(self, env_id: str) -> Mapping[str, inspect.Parameter]:
        """The keyword arguments ``env_id``'s constructor takes; a parameter's default decides
        the JSON type a spec must give (``learners.admission.envs``)."""

    def ranges(self, env_id: str) -> tuple[KwargRange, ...]:
        """Integer arguments with bounds (checked before anything is built)."""
        return ()

    def kwarg_conflicts(self, env_id: str, kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Arguments within their ranges that do not go together, as ``(kwarg, reason)``, for
        ``kwargs`` with every default filled in; checked before anything is built, so that an
        env whose constructor would never return (or eat the API's memory) is refused."""
        return []

    def action_kind(self, env_id: str, kwargs: Mapping[str, Any]) -> ActionKind:
        """The action kind ``env_id`` acts in with ``kwargs`` (validated). By default its only
        one; a suite whose ids offer both says how the kwargs choose."""
        (kind,) = self.entry(env_id).action_kinds
        return kind

    def action_kind_field(self, env_id: str) -> str | None:
        """The kwarg that chooses the action kind, if one does (mpe2's ``continuous_actions``)."""
        return None

    def teams(self, env_id: str, kwargs: Mapping[str, Any]) -> tuple[str, ...]:
        """Each agent's team with ``kwargs``; by default the listing's."""
        return self.entry(env_id).teams

    @abc.abstractmethod
    def sizes(self, env_id: str, kwargs: Mapping[str, Any]) -> EnvShape:
        """The shape of one copy with ``kwargs`` (may build a throwaway copy; the caller bounds
        the counts first). Raises what the env's constructor raises for kwargs it refuses."""

    def copy_mib(self, env_id: str, kwargs: Mapping[str, Any]) -> float:
        """The memory one copy holds, MiB (the admission memory estimate adds it per copy)."""
        return 8.0

    @abc.abstractmethod
    def factory(
        self, env_id: str, kwargs: Mapping[str, Any], seed: int, render: bool
    ) -> EnvFactory:
        """What builds copies of ``env_id`` with ``kwargs`` (on a worker)."""


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is not there
        return False


def signature_parameters(target: Any) -> dict[str, inspect.Parameter]:
    """The keyword parameters ``target`` (a class or a function) takes, following ``**kwargs``
    into the base classes it forwards them to (MuJoCo envs forward theirs to ``MujocoEnv``)."""
    classes = inspect.getmro(target) if inspect.isclass(target) else (target,)
    params: dict[str, inspect.Parameter] = {}
    for cls in classes:
        signature = inspect.signature(cls.__init__ if inspect.isclass(cls) else cls)
        for name, param in signature.parameters.items():
            if name != "self" and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                params.setdefault(name, param)
        if not any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
            break
    return params


def parameter(name: str, default: Any) -> inspect.Parameter:
    """A keyword parameter with ``default``, for suites that list their arguments by hand."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
