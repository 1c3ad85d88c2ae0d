"""A sweep's search space, and its expansion into the experiment specs it stands for.

A sweep is a base spec, a search space and seeds (``SweepSpec``). The space has a ``grid`` (a list
of values per spec path, crossed: every combination) and/or a ``random`` part (a distribution per
spec path, drawn ``num_samples`` times from a generator seeded by the space's ``seed``); the grid's
combinations are crossed with the random draws. Each resulting **configuration** is trained once
per seed. A spec path is dotted into the spec's JSON: ``hyperparameters.learning_rate``,
``env.kwargs.N``, ``env.num_envs``, ``total_steps``.

``expand`` builds every child spec and validates each with ``learners.spec.parse_spec``, so a sweep
is refused whole (nothing stored) when any child would be; each problem names the parameter and
the value that caused it (``space.grid.<path>``) or the base spec's field (``base.<field>``); an
``early_stopping`` (or ``search`` with ``method: asha``) whose rungs do not fit a child's budget
and evaluations is refused the same way (``early_stopping.rungs``, ``search.rungs``). A sweep
with a model-based ``search`` (``core.sweeps.tpe``) has no configurations at submission:
``expand`` checks the ones that stand for every configuration the search can reach, and the
scheduler builds each proposed one with ``child_spec``. A PBT search (``core.sweeps.pbt``) is
checked the same way and stores its round 0 at submission, one run per member
(``_first_round``); its later rounds are built by ``core.sweeps.generations``. Nothing here
touches a database.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from core.sweeps import pbt, tpe
from core.sweeps.asha import EarlyStopping, rung_errors, spelling_errors
from core.sweeps.distributions import distribution_errors, draws_of
from core.sweeps.search import Search, untagged
from learners.api import (
    ExperimentSpec,
    FieldError,
    Label,
    SpecError,
    errors_from_validation,
    parse_spec,
)

_STRICT = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

PATH_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
SET_BY_SWEEP = {"seed": "set by the sweep's `seeds`", "name": "set by the sweep for each run"}
MAX_ERRORS = 20
"""A refusal lists at most this many problems (a bad base spec would repeat one per child)."""


class SearchSpace(BaseModel):
    """What varies between a sweep's configurations."""

    model_config = _STRICT

    grid: dict[str, list[JsonValue]] = Field(default_factory=dict)
    """Per spec path, the values to try; the grid is every combination of them."""
    random: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    """Per spec path, a distribution: ``{"choice": [v, ...]}``, ``{"uniform": [low, high]}``,
    ``{"log_uniform": [low, high]}`` (low > 0) or ``{"int_uniform": [low, high]}`` (both
    included)."""
    num_samples: int = Field(default=1, ge=1, le=1000)
    """How many draws of the ``random`` part (each crossed with every grid combination)."""
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """Seeds the random draws: the same space and seed give the same configurations."""


class SweepSpec(BaseModel):
    """What ``POST /v1/sweeps`` takes."""

    model_config = _STRICT

    name: Label = Field(default="", max_length=150)
    """A name for people (one line of printable text); empty: the base spec's name. Each run is
    named ``<name> <config> s<seed>``."""
    base: dict[str, JsonValue]
    """An experiment spec (as ``POST /v1/experiments`` takes) that every run starts from; its
    ``seed`` is left out (``seeds`` sets it)."""
    space: SearchSpace = Field(default_factory=SearchSpace)
    """What varies between configurations."""
    seeds: list[int] | int = 3
    """The seeds each configuration is trained with: a list, or a count ``n`` for seeds 0 to n-1."""
    max_concurrent: int = Field(default=4, ge=1, le=1000)
    """At most this many of the sweep's runs are queued or running at once; the rest wait as
    ``pending``."""
    early_stopping: EarlyStopping | None = None
    """Stop runs of configurations that fall behind at the rungs (``core.sweeps.asha``); null:
    every run trains its whole budget."""
    search: Search | None = None
    """Propose configurations one by one from the results so far (``{"method": "tpe", "trials":
    N}``, ``core.sweeps.tpe``) over ``space.random``, or train a population whose members copy
    and perturb the best after each round (``{"method": "pbt", "population": N, "round_steps":
    K}``, ``core.sweeps.pbt``), or stop runs behind at the rungs (``{"method": "asha", "rungs":
    [...]}``: ``early_stopping`` spelled as the search); null: the grid and the random draws."""

    @property
    def population(self) -> pbt.PopulationSearch | None:
        """The PBT search, if the sweep is one."""
        return self.search if isinstance(self.search, pbt.PopulationSearch) else None

    @property
    def model_search(self) -> tpe.ModelSearch | None:
        """The model-based search, if the sweep is one."""
        return self.search if isinstance(self.search, tpe.ModelSearch) else None

    @property
    def proposes(self) -> bool:
        """Whether its search (tpe, pbt) proposes configurations as it runs; ASHA does not."""
        return self.model_search is not None or self.population is not None

    @property
    def stopping(self) -> EarlyStopping | None:
        """Its early stopping: ``early_stopping``, or ``search`` with ``method: asha``."""
        if isinstance(self.search, EarlyStopping):
            return self.search
        return self.early_stopping


@dataclass(frozen=True)
class Configuration:
    """One point of the search space: its key within the sweep (``c0``, ``c1``...) and values."""

    key: str
    params: dict[str, Any]
    lineage: dict[str, Any] = dataclasses.field(default_factory=dict)
    """A PBT member's round: ``member``, ``round``, ``continues`` (the configuration whose
    checkpoint it continues, null in round 0) and ``exploited`` (``core.sweeps.pbt``)."""

    def stored(self) -> dict[str, Any]:
        """The configuration as the sweep's row keeps it."""
        return {"key": self.key, "params": self.params, **self.lineage}


@dataclass(frozen=True)
class Child:
    """One run of a sweep: a configuration trained with one seed, as a validated spec."""

    config: str
    seed: int
    spec: dict[str, Any]


@dataclass(frozen=True)
class Expansion:
    """Everything a sweep stands for, in the order its runs should start (seed-major). A
    model-based search has no configurations and no children yet; ``base`` is the base spec with
    its ``init`` resolved by ``check`` (the checkpoint every proposed run starts from)."""

    configurations: list[Configuration]
    seeds: list[int]
    children: list[Child]
    base: dict[str, Any]


def parse_sweep(data: Any) -> SweepSpec:
    """The submitted sweep's own fields, validated as JSON, or ``SpecError`` naming each field.
    The children are checked by ``expand``."""
    if not isinstance(data, Mapping):
        raise SpecError([FieldError("body", "the sweep must be a JSON object")])
    try:
        sweep = SweepSpec.model_validate_json(json.dumps(dict(data)), strict=True)
    except ValidationError as exc:
        raise SpecError([untagged(e) for e in errors_from_validation(exc)]) from None
    errors = _seed_errors(sweep.seeds) + _path_errors(sweep)
    errors += [e for path, d in sweep.space.random.items() for e in distribution_errors(path, d)]
    if sweep.population is not None:
        errors += pbt.search_errors(
            sweep.space.random,
            sweep.space.grid,
            "num_samples" in sweep.space.model_fields_set,
            "seeds" in sweep.model_fields_set,
            sweep.early_stopping is not None,
        )
    elif sweep.model_search is not None:
        errors += tpe.search_errors(
            sweep.space.random,
            sweep.space.grid,
            "num_samples" in sweep.space.model_fields_set,
        )
    errors += spelling_errors(sweep.search, sweep.early_stopping)
    if "seed" in sweep.base:
        errors.append(FieldError("base.seed", "leave it out: the sweep's `seeds` set each run's"))
    if errors:
        raise SpecError(errors)
    return sweep


def seeds_of(sweep: SweepSpec) -> list[int]:
    """The sweep's seeds as a list (a PBT search's: its members', ``pbt.member_seed``)."""
    if (population := sweep.population) is not None:
        return [pbt.member_seed(sweep.space.seed, m) for m in range(population.population)]
    return list(range(sweep.seeds)) if isinstance(sweep.seeds, int) else list(sweep.seeds)


def run_count(sweep: SweepSpec) -> int:
    """How many runs the sweep stands for (without building them)."""
    if (population := sweep.population) is not None:
        total = sweep.base.get("total_steps")
        per_member = total // population.round_steps if isinstance(total, int) else 1
        return population.population * max(per_member, 1)
    if (search := sweep.model_search) is not None:
        return search.trials * len(seeds_of(sweep))
    grid = math.prod(len(values) for values in sweep.space.grid.values())
    draws = sweep.space.num_samples if sweep.space.random else 1
    return grid * draws * len(seeds_of(sweep))


def configurations(space: SearchSpace) -> list[Configuration]:
    """The grid's combinations crossed with the random draws, keyed ``c0``, ``c1``... (the last
    grid path varies fastest, then the draws)."""
    grid_paths = list(space.grid)
    combos = list(itertools.product(*(space.grid[p] for p in grid_paths)))
    draws = draws_of(space.random, space.seed, space.num_samples) if space.random else [{}]
    points = [
        {**dict(zip(grid_paths, combo, strict=True)), **draw} for combo in combos for draw in draws
    ]
    return [Configuration(key=f"c{i}", params=params) for i, params in enumerate(points)]


def expand(
    sweep: SweepSpec, check: Callable[[ExperimentSpec], ExperimentSpec] | None = None
) -> Expansion:
    """Every run of the sweep as a validated spec, or ``SpecError`` naming what would fail;
    ``check`` is a further step on each parsed spec that raises ``SpecError`` or returns the spec
    to store (the deployment's bounds, ``core.quotas.check_spec_bounds``; a warm start resolved
    to its checkpoint, ``core.experiments.warm_start.resolve``). A model-based search's
    reachable configurations are checked (``tpe.reachable``, with the first seed) and none is
    kept."""
    proposed = sweep.proposes
    if proposed:
        configs = [
            Configuration(key=f"corner{i}", params=params)
            for i, params in enumerate(tpe.reachable(sweep.space.random))
        ]
    else:
        configs = configurations(sweep.space)
    seeds = seeds_of(sweep)
    name = sweep.name or str(sweep.base.get("name", "")) or "sweep"
    swept: dict[tuple[str, str], FieldError] = {}
    unswept: dict[tuple[str, str], dict[str, Configuration]] = {}
    children: list[Child] = []
    first: ExperimentSpec | None = None
    # A search's corners are checked with one seed: a spec's seed decides nothing they check, and
    # corners × seeds could be thousands of checks in one request.
    for seed in seeds[:1] if proposed else seeds:
        for config in configs:
            spec = child_spec(sweep.base, config, seed, f"{name} {config.key} s{seed}")
            try:
                parsed = parse_spec(spec)
                if check is not None:
                    parsed = check(parsed)
            except SpecError as exc:
                for error in exc.errors:
                    located = _locate(error, config, sweep.space)
                    if located is not None:
                        swept.setdefault((located.field, located.reason), located)
                    else:
                        unswept.setdefault((error.field, error.reason), {})[config.key] = config
                continue
            first = first or parsed
            if (stopping := sweep.stopping) is not None:
                field = "search" if stopping is sweep.search else "early_stopping"
                for error in rung_errors(stopping, parsed, field):
                    swept.setdefault((error.field, error.reason), error)
            children.append(Child(config.key, seed, parsed.model_dump(mode="json")))
    errors = list(swept.values()) + _base_errors(unswept, len(configs))
    if errors:
        raise SpecError(errors[:MAX_ERRORS])
    base = copy.deepcopy(dict(sweep.base))
    if children and children[0].spec.get("init") is not None:
        base["init"] = children[0].spec["init"]
    if (population := sweep.population) is not None and first is not None:
        if errors := pbt.spec_errors(population, sweep.space.random, first):
            raise SpecError(errors[:MAX_ERRORS])
        members, children = _first_round(sweep, population, name, check)
        return Expansion(configurations=members, seeds=seeds, children=children, base=base)
    if proposed:
        return Expansion(configurations=[], seeds=seeds, children=[], base=base)
    return Expansion(configurations=configs, seeds=seeds, children=children, base=base)


def _first_round(
    sweep: SweepSpec,
    population: pbt.PopulationSearch,
    name: str,
    check: Callable[[ExperimentSpec], ExperimentSpec] | None,
) -> tuple[list[Configuration], list[Child]]:
    """A PBT search's round 0: ``population`` draws of ``space.random``, member ``m`` with its
    seed, each run one round long."""
    draws = draws_of(sweep.space.random, sweep.space.seed, population.population)
    configs, children = [], []
    base = {**sweep.base, "total_steps": population.round_steps}
    for member, params in enumerate(draws):
        lineage = {"member": member, "round": 0, "continues": None, "exploited": False}
        config = Configuration(pbt.key(member, 0), params, lineage)
        seed = pbt.member_seed(sweep.space.seed, member)
        spec = child_spec(base, config, seed, f"{name} m{member} r0")
        try:
            parsed = parse_spec(spec)
            if check is not None:
                parsed = check(parsed)
        except SpecError as exc:
            located = [_locate(e, config, sweep.space) or e for e in exc.errors]
            raise SpecError(located[:MAX_ERRORS]) from None
        configs.append(config)
        children.append(Child(config.key, seed, parsed.model_dump(mode="json")))
    return configs, children


def _base_errors(
    unswept: dict[tuple[str, str], dict[str, Configuration]], configs: int
) -> list[FieldError]:
    """Problems of fields no swept path touches: the base's own when every configuration has
    them (named once), else the combinations that cause them (the memory estimate of one)."""
    errors = []
    for (field, reason), failing in unswept.items():
        if len(failing) == configs or field == "body":
            errors.append(FieldError(f"base.{field}", reason))
            continue
        for config in failing.values():
            values = ", ".join(f"{p}={_show(v)}" for p, v in config.params.items())
            errors.append(FieldError(f"base.{field}", f"with {values}: {reason}"))
    return errors


def child_spec(base: dict[str, Any], config: Configuration, seed: int, name: str) -> dict[str, Any]:
    """The spec of one run: ``base`` with the configuration's values, the seed and the name."""
    spec = copy.deepcopy(base)
    for path, value in config.params.items():
        _set(spec, path.split("."), copy.deepcopy(value))
    spec["seed"] = seed
    spec["name"] = name[:200]
    return spec


def _set(target: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        inner = target.get(part)
        if not isinstance(inner, dict):
            # A path through a missing (or non-object) field makes it an object: parse_spec
            # then says whether the field takes one.
            inner = target[part] = {}
        target = inner
    target[parts[-1]] = value


def _locate(error: FieldError, config: Configuration, space: SearchSpace) -> FieldError | None:
    """The swept parameter behind a child's error, named with its value; None when the error is
    in a field no swept path touches."""
    for path, value in config.params.items():
        if (
            error.field == path
            or error.field.startswith(path + ".")
            or path.startswith(error.field + ".")
        ):
            part = "grid" if path in space.grid else "random"
            reason = f"value {_show(value)} in configuration {config.key}: {error.reason}"
            return FieldError(f"space.{part}.{path}", reason)
    return None


def _show(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _seed_errors(seeds: list[int] | int) -> list[FieldError]:
    if isinstance(seeds, int):
        ok = 1 <= seeds <= 100
        return [] if ok else [FieldError("seeds", "a count must be between 1 and 100")]
    if not 1 <= len(seeds) <= 100:
        return [FieldError("seeds", "give between 1 and 100 seeds")]
    if len(set(seeds)) != len(seeds):
        return [FieldError("seeds", "each seed once")]
    bad = [s for s in seeds if not 0 <= s <= 2**31 - 1]
    return [FieldError("seeds", f"{bad[0]} is not between 0 and 2**31 - 1")] if bad else []


def _path_errors(sweep: SweepSpec) -> list[FieldError]:
    errors = []
    for part, paths in (("grid", sweep.space.grid), ("random", sweep.space.random)):
        for path, values in paths.items():
            field = f"space.{part}.{path}"
            head = path.split(".")[0]
            if not PATH_PATTERN.match(path):
                errors.append(FieldError(field, "a spec path is dotted names, e.g. env.kwargs.N"))
            elif head in SET_BY_SWEEP:
                errors.append(FieldError(field, f"cannot be swept: {SET_BY_SWEEP[head]}"))
            elif part == "grid" and path in sweep.space.random:
                errors.append(FieldError(field, "is also in space.random; sweep it in one"))
            elif part == "grid" and not 1 <= len(values) <= 100:
                errors.append(FieldError(field, "give between 1 and 100 values"))
    return errors
