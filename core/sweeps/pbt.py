"""Population-based training (Jaderberg et al. 2017, "Population Based Training of Neural
Networks"): the search's decisions, on plain values. Nothing here touches a database.

A sweep with ``search: {"method": "pbt", "population": N, "round_steps": K}`` trains N
**members** side by side in **rounds** of K env steps, ``base.total_steps / K`` rounds in all.
Round 0 draws each member's hyperparameters from ``space.random`` (seeded by ``space.seed``)
and trains member ``m`` with seed ``space.seed + m``. Each later round is decided when every run
of the round before it has ended (synchronous PBT: the decisions depend on nothing but the
results, so an API restart, or another API process, makes the same ones):

- **exploit**: the members are ranked by their round's final evaluation return (a member whose
  run failed ranks last); each of the bottom ``quantile`` (at least one member), and every
  member whose run failed, continues the checkpoint of a member of the top ``quantile`` drawn
  at random, instead of its own;
- **explore**: such a member's hyperparameters are the top member's, perturbed: each swept value
  is drawn again from its distribution with ``resample_probability``, else multiplied by one of
  ``factors`` (an ``int_uniform`` one rounded, a ``choice`` moved to a neighbouring option), and
  kept within its distribution's range, which the submission checked (``tpe.reachable``'s
  corners).

The other members continue their own checkpoints with their own values. A member's round is an
ordinary run that continues the checkpoint (``init.what: run``) and whose ``schedule`` holds the
member's whole history, so the spec of a member's last run, without its ``init``, is one run that
trains the same weights bit for bit (``learners.admission.schedule``). Only what a run may change
while it trains can be searched (``AlgorithmConfig.mutable_fields``), and a config whose run
depends on its ``total_steps`` (PPO's ``linear_lr_decay``) is refused: each round is a run of
another budget.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.sweeps.distributions import sampler, six
from learners.api import (
    MAX_TOTAL_STEPS,
    ExperimentSpec,
    FieldError,
    iteration_steps,
    mutable_names,
)

HYPERPARAMETERS = "hyperparameters."
Factor = Annotated[float, Field(gt=0, le=100)]
"""A factor explore multiplies a number by."""


class PopulationSearch(BaseModel):
    """A sweep's ``search`` for population-based training."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    method: Literal["pbt"]
    """``pbt``: population-based training."""
    population: int = Field(ge=2, le=100)
    """How many members train side by side."""
    round_steps: int = Field(gt=0, le=MAX_TOTAL_STEPS)
    """The env steps of one round: every member trains this many, then the bottom of the
    population copies the top. ``base.total_steps`` must be a multiple of it (at least two
    rounds), and it a multiple of the steps between two updates of a run."""
    quantile: float = Field(default=0.25, gt=0, le=0.5)
    """The fraction of the population (at least one member) that copies a member of the same
    fraction at the top after each round."""
    resample_probability: float = Field(default=0.25, ge=0, le=1)
    """The chance that explore draws a value afresh from its distribution instead of perturbing
    the copied one."""
    factors: tuple[Factor, Factor] = (0.8, 1.25)
    """The factors explore multiplies a copied number by, one of the two at random."""
    metric: Literal["eval/episode_return"] = "eval/episode_return"
    """What members are ranked by, higher is better: each run's final greedy evaluation return,
    taken at the end of its round."""


def rounds(search: PopulationSearch, total_steps: int) -> int:
    """How many rounds a member trains."""
    return total_steps // search.round_steps


def member_seed(space_seed: int, member: int) -> int:
    """The seed member ``member`` trains with (its lineage keeps it when others copy it)."""
    return (space_seed + member) % 2**31


def key(member: int, round_: int) -> str:
    """A member's round as a configuration key: ``m3.r2``."""
    return f"m{member}.r{round_}"


def search_errors(
    space_random: dict[str, Any],
    grid: dict[str, Any],
    num_samples_set: bool,
    seeds_set: bool,
    early_stopping: bool,
) -> list[FieldError]:
    """Why a sweep's other fields do not go with a PBT search (none: they do)."""
    errors = []
    if grid:
        errors.append(FieldError("space.grid", "a pbt search explores space.random only"))
    if not space_random:
        errors.append(FieldError("space.random", "a pbt search needs at least one distribution"))
    for path in space_random:
        if not path.startswith(HYPERPARAMETERS) or path.count(".") != 1:
            reason = "a pbt search changes hyperparameters only (hyperparameters.<name>)"
            errors.append(FieldError(f"space.random.{path}", reason))
    if num_samples_set:
        errors.append(FieldError("space.num_samples", "a pbt search draws search.population"))
    if seeds_set:
        errors.append(
            FieldError("seeds", "a pbt member trains with seed space.seed + its index: leave out")
        )
    if early_stopping:
        errors.append(FieldError("early_stopping", "a pbt search stops no member early"))
    return errors


def spec_errors(
    search: PopulationSearch, space_random: dict[str, Any], spec: ExperimentSpec
) -> list[FieldError]:
    """Why a member's run of the parsed base ``spec`` cannot be searched this way."""
    errors = []
    mutable = mutable_names(spec)
    for path in space_random:
        name = path.removeprefix(HYPERPARAMETERS)
        if name not in mutable:
            reason = (
                f"a run of {spec.algorithm} cannot change {name} while it trains, so pbt cannot "
                f"explore it; it may explore {', '.join(mutable) or 'nothing'}"
            )
            errors.append(FieldError(f"space.random.{path}", reason))
    config = spec.config()
    for name in config.horizon_fields:
        if getattr(config, name):
            reason = (
                f"must be false in a pbt search: it ties the run to its total_steps, and each "
                f"round is a run of another budget (explore {', '.join(mutable[:1])} instead)"
            )
            errors.append(FieldError(f"base.hyperparameters.{name}", reason))
    total = spec.total_steps
    if total % search.round_steps or total // search.round_steps < 2:
        reason = f"base.total_steps ({total:,}) must be at least two rounds, a whole number of them"
        errors.append(FieldError("search.round_steps", reason))
    every = iteration_steps(spec)
    if search.round_steps % every:
        reason = (
            f"must be a multiple of {every:,}, the env steps between two updates of a run "
            "(env.num_envs x rollout_length on policy, env.num_envs off policy)"
        )
        errors.append(FieldError("search.round_steps", reason))
    if spec.init is not None:
        errors.append(FieldError("base.init", "a pbt member starts fresh: leave init out"))
    if spec.schedule:
        errors.append(FieldError("base.schedule", "a pbt search writes its members' schedules"))
    return errors


@dataclass(frozen=True)
class Member:
    """A member at the end of a round: its values, and its run's final score (None: the run
    failed or has no evaluation at the round's end)."""

    index: int
    params: dict[str, Any]
    score: float | None


@dataclass(frozen=True)
class Decision:
    """What a member trains in the next round: the checkpoint of member ``source`` (itself
    unless it exploits another) with ``params``."""

    member: int
    source: int
    params: dict[str, Any]

    @property
    def exploited(self) -> bool:
        return self.source != self.member


def decide(
    members: Sequence[Member],
    search: PopulationSearch,
    space_random: dict[str, dict[str, Any]],
    space_seed: int,
    round_: int,
) -> list[Decision] | None:
    """The next round of ``members`` (ranked after round ``round_``), or None when no member has
    a score to copy (every run of the round failed)."""
    scored = [m for m in members if m.score is not None]
    scored.sort(key=lambda m: (-(m.score or 0.0), m.index))
    if not scored:
        return None
    cut = max(1, math.floor(search.quantile * len(members)))
    top = scored[:cut]
    # Failed members rank last, and each of them copies even past the quantile.
    failed = [m for m in members if m.score is None]
    ranking = scored + sorted(failed, key=lambda m: m.index)
    bottom = {m.index for m in ranking[len(ranking) - cut :] if m not in top}
    bottom |= {m.index for m in failed}
    rng = np.random.default_rng([space_seed, round_])
    decisions = []
    for member in sorted(members, key=lambda m: m.index):
        if member.index not in bottom:
            decisions.append(Decision(member.index, member.index, dict(member.params)))
            continue
        source = top[int(rng.integers(len(top)))]
        params = explore(source.params, space_random, search, rng)
        decisions.append(Decision(member.index, source.index, params))
    return decisions


def explore(
    params: dict[str, Any],
    space_random: dict[str, dict[str, Any]],
    search: PopulationSearch,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """``params`` perturbed (see the module's docstring), each path in the space's order."""
    out = {}
    for path, distribution in space_random.items():
        kind, args = next(iter(distribution.items()))
        value = params[path]
        if rng.random() < search.resample_probability:
            out[path] = sampler(distribution)(rng)
        elif kind == "choice":
            index = _index(args, value)
            step = -1 if rng.random() < 0.5 else 1
            out[path] = copy.deepcopy(args[min(max(index + step, 0), len(args) - 1)])
        else:
            factor = search.factors[int(rng.integers(2))]
            low, high = args
            if kind == "int_uniform":
                out[path] = int(min(max(round(value * factor), low), high))
            else:
                out[path] = min(max(six(value * factor), float(low)), float(high))
    return out


def _index(options: list[Any], value: Any) -> int:
    for i, option in enumerate(options):
        if option == value:
            return i
    return 0


def continuation(
    parent_spec: dict[str, Any],
    parent_id: str,
    decision: Decision,
    source_params: dict[str, Any],
    round_: int,
    search: PopulationSearch,
    name: str,
) -> dict[str, Any]:
    """The spec of ``decision``'s member in round ``round_``: the run of its source's last round
    (``parent_spec``, ``parent_id``) continued for one more round, with a change in its schedule
    where the values differ from the source's (``source_params``)."""
    spec = copy.deepcopy(parent_spec)
    at = round_ * search.round_steps
    spec["total_steps"] = at + search.round_steps
    spec["name"] = name[:200]
    spec["init"] = {"experiment_id": parent_id, "checkpoint_id": "latest", "what": "run"}
    changed = {
        path.removeprefix(HYPERPARAMETERS): value
        for path, value in decision.params.items()
        if value != source_params.get(path)
    }
    if changed:
        spec["schedule"] = [*spec.get("schedule", []), {"at_step": at, "hyperparameters": changed}]
    return spec
