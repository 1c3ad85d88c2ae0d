"""Limits on a spec, checked when it is submitted, so that no spec can hurt the worker that runs it.

``assess`` gives every reason a (parsed) spec may not run, as ``FieldError``s that name the field
and the limit, and the estimate of the run's memory they were judged by. Two kinds of limit:

- Structural bounds, per environment: agent and landmark counts, episode length, the MuJoCo
  kwargs that size a step or a rendering, observation and action sizes and env copies times
  agents (total steps and layer widths are bounded by the spec's and the config's own fields).
  They keep the env a worker builds, and the update it runs, at sizes these small networks are
  made for. ``docs/api.md`` ("Limits on a spec") lists them.
- The memory estimate (``learners.admission.memory``): buffers, networks with their Adam state,
  the update's working set, env copies and the framework runtime, against a per-run budget the
  caller passes (the service's ``MARLFORGE_RUN_MEMORY_MB``). Past a bound the spec's shape is not
  worked out, so a spec refused for its agent count gets no estimate.

Pure: no framework, web or database import. Working out an mpe2 scenario's sizes builds one copy
(``learners.envs.shapes``), and only after its counts passed the bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from learners.admission.memory import MemoryEstimate, estimate_memory
from learners.enums import EnvEngine, EnvSuite
from learners.envs.catalogue import constructor_parameters, env_shape, suite
from learners.envs.shapes import EnvShape
from learners.envs.suites.base import KwargRange
from learners.spec import MAX_VECTOR_ENVS, EnvSpec, ExperimentSpec, FieldError

MAX_AGENTS = 32
"""Agents per env copy. Every agent's observation grows with the others (MPE observations list
every agent and landmark), so a copy's arrays grow with the square of this; 32 agents give
observations of about 200 features and a global state of about 6,000."""
MAX_LANDMARKS = 32
"""Landmarks or obstacles per env copy (they add observation features too)."""
MAX_EPISODE_STEPS = 1000
"""mpe2's ``max_cycles``: 40 times the scenarios' 25. An episode buffer pads every stored episode
to this length, so it multiplies that buffer's size."""
MAX_AGENT_COPIES = 2048
"""``num_envs`` times the agents of one copy: the rows every batched step acts for (the policy's
forward pass is on the acting path, and copies step one after another on the CPU)."""
MAX_ENVS = 256
"""``num_envs`` on every engine but the vector engine (copies step one after another); a suite may
set a lower bound of its own (``Suite.max_envs``)."""
MAX_VECTOR_AGENT_COPIES = 65_536
"""The same bound on the vector engine, which steps every copy in one array operation: 4,096
copies of a scenario with 16 agents."""
MAX_OBS_DIM = 1024
"""Features per agent's observation (a backstop: the count bounds keep MPE's under ~200)."""
MAX_ACTION_DIM = 64
"""Action size (a backstop: the catalogue's envs have at most 6)."""


@dataclass(frozen=True)
class MPEScenario:
    """The count arguments of an mpe2 scenario and how they make its agent count."""

    counts: tuple[KwargRange, ...]
    agents: Callable[[Mapping[str, int]], int]
    """The number of agents, from the counts (each filled with its default when not given)."""
    agents_formula: str
    """How ``agents`` adds up, for the reason."""


MPE_SCENARIOS: dict[str, MPEScenario] = {
    "simple_spread_v3": MPEScenario(
        (KwargRange("N", 1, MAX_AGENTS, "agents"),), lambda c: c["N"], "N"
    ),
    "simple_adversary_v3": MPEScenario(
        # N good agents, one adversary and N landmarks.
        (KwargRange("N", 1, MAX_AGENTS - 1, "good agents"),),
        lambda c: c["N"] + 1,
        "N + 1",
    ),
    "simple_push_v3": MPEScenario((), lambda c: 2, "2"),
    "simple_v3": MPEScenario((), lambda c: 1, "1"),
    "simple_speaker_listener_v4": MPEScenario((), lambda c: 2, "2"),
    "simple_reference_v3": MPEScenario((), lambda c: 2, "2"),
    "simple_crypto_v3": MPEScenario((), lambda c: 3, "3"),
    "simple_formation_v1": MPEScenario(
        (KwargRange("N", 1, MAX_AGENTS, "agents"),), lambda c: c["N"], "N"
    ),
    "simple_line_v1": MPEScenario(
        (KwargRange("N", 1, MAX_AGENTS, "agents"),), lambda c: c["N"], "N"
    ),
    "simple_world_comm_v3": MPEScenario(
        (
            KwargRange("num_good", 1, MAX_AGENTS - 1, "good agents"),
            KwargRange("num_adversaries", 1, MAX_AGENTS - 1, "adversaries (the leader among them)"),
            KwargRange("num_obstacles", 0, MAX_LANDMARKS, "obstacles"),
            KwargRange("num_food", 0, MAX_LANDMARKS, "food landmarks"),
            KwargRange("num_forests", 0, MAX_LANDMARKS, "forests"),
        ),
        lambda c: c["num_good"] + c["num_adversaries"],
        "num_good + num_adversaries",
    ),
    "collect_treasure_v1": MPEScenario(
        (
            KwargRange("num_collectors", 1, MAX_AGENTS - 1, "collectors"),
            KwargRange("num_deposits", 1, MAX_AGENTS - 1, "deposits"),
            KwargRange("num_treasures", 1, MAX_LANDMARKS, "treasures"),
        ),
        lambda c: c["num_collectors"] + c["num_deposits"],
        "num_collectors + num_deposits",
    ),
    "simple_tag_v3": MPEScenario(
        (
            KwargRange("num_good", 1, MAX_AGENTS - 1, "good agents"),
            KwargRange("num_adversaries", 1, MAX_AGENTS - 1, "adversaries"),
            KwargRange("num_obstacles", 0, MAX_LANDMARKS, "obstacles"),
        ),
        lambda c: c["num_good"] + c["num_adversaries"],
        "num_good + num_adversaries",
    ),
}

# Every mpe2 scenario's other arguments that size something. Partial observability pads each
# observation to the neighbours asked for, however many there are.
MPE_RANGES: tuple[KwargRange, ...] = (
    KwargRange("max_cycles", 1, MAX_EPISODE_STEPS, "steps per episode"),
    KwargRange("num_agent_neighbors", 1, MAX_AGENTS, "observed neighbours"),
    KwargRange("num_landmark_neighbors", 1, MAX_LANDMARKS, "observed landmarks"),
)
# MuJoCo's: physics steps per env step (time), and the renderer's buffers, which replays allocate
# from the spec's kwargs (GIF frames are shrunk to 320 pixels anyway).
MUJOCO_RANGES: tuple[KwargRange, ...] = (
    KwargRange("frame_skip", 1, 25, "physics steps per env step"),
    KwargRange("width", 1, 1024, "pixels of rendering width"),
    KwargRange("height", 1, 1024, "pixels of rendering height"),
    KwargRange("max_geom", 1, 10_000, "rendered geoms"),
)


@dataclass(frozen=True)
class Assessment:
    """Whether a spec stays within the limits, and the estimate it was judged by."""

    errors: tuple[FieldError, ...]
    """Every limit the spec is past; empty when it may run."""
    estimate: MemoryEstimate | None
    """The run's memory; ``None`` when a structural bound failed before its shape was known."""


def _given(env: EnvSpec, name: str) -> Any:
    """The spec's value of constructor argument ``name``, or the constructor's default."""
    if name in env.kwargs:
        return env.kwargs[name]
    return constructor_parameters(env.suite, env.id)[name].default


def _range_error(env: EnvSpec, rule: KwargRange) -> FieldError | None:
    value = _given(env, rule.kwarg)
    field = f"env.kwargs.{rule.kwarg}"
    if value is None and constructor_parameters(env.suite, env.id)[rule.kwarg].default is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        return FieldError(field, f"must be an integer from {rule.low} to {rule.high:,}")
    if value > rule.high:
        return FieldError(field, f"at most {rule.high:,} {rule.unit} on {env.id} (got {value})")
    if value < rule.low:
        return FieldError(field, f"at least {rule.low} {rule.unit} on {env.id} (got {value})")
    return None


def _agent_count_errors(env: EnvSpec, scenario: MPEScenario) -> list[FieldError]:
    errors = [e for rule in scenario.counts if (e := _range_error(env, rule)) is not None]
    if errors:
        return errors
    counts = {rule.kwarg: int(_given(env, rule.kwarg)) for rule in scenario.counts}
    agents = scenario.agents(counts)
    if agents <= MAX_AGENTS:
        return []
    # Name the largest count the spec set: lowering it is the likeliest fix.
    set_here = [rule.kwarg for rule in scenario.counts if rule.kwarg in env.kwargs]
    kwarg = max(set_here or list(counts), key=lambda name: counts[name])
    reason = f"at most {MAX_AGENTS} agents on {env.id} ({scenario.agents_formula} = {agents})"
    return [FieldError(f"env.kwargs.{kwarg}", reason)]


def mpe_agent_steps(env: EnvSpec, episodes: int) -> int:
    """The agent steps ``episodes`` whole episodes of an mpe scenario take: episodes times its
    agents times its ``max_cycles`` (the compute a match costs). Only for an env whose kwargs
    ``env_kwarg_errors`` passed."""
    scenario = MPE_SCENARIOS[env.id]
    agents = scenario.agents({rule.kwarg: int(_given(env, rule.kwarg)) for rule in scenario.counts})
    return episodes * agents * int(_given(env, "max_cycles"))


def env_kwarg_errors(env: EnvSpec) -> list[FieldError]:
    """The env's count and size arguments past their bounds (checked before anything is built)."""
    params = constructor_parameters(env.suite, env.id)
    errors: list[FieldError] = []
    ranges: tuple[KwargRange, ...] = suite(env.suite).ranges(env.id)
    if env.suite == EnvSuite.MPE:
        errors = _agent_count_errors(env, MPE_SCENARIOS[env.id])
        ranges = MPE_RANGES
    elif env.suite == EnvSuite.GYMNASIUM:
        ranges = MUJOCO_RANGES
    for rule in ranges:
        if rule.kwarg in params and (error := _range_error(env, rule)) is not None:
            errors.append(error)
    if not errors:
        given = {name: _given(env, name) for name in params}
        for kwarg, reason in suite(env.suite).kwarg_conflicts(env.id, given):
            errors.append(FieldError(f"env.kwargs.{kwarg}", reason))
    return errors


def shape_errors(env: EnvSpec, shape: EnvShape) -> list[FieldError]:
    """The bounds on what the env's kwargs make: sizes per agent, and copies times agents."""
    size_field = "env.id" if env.suite == EnvSuite.GYMNASIUM else "env.kwargs"
    errors = []
    if shape.obs_dim > MAX_OBS_DIM:
        reason = f"at most {MAX_OBS_DIM:,} observation features per agent (got {shape.obs_dim:,})"
        errors.append(FieldError(size_field, reason))
    if shape.action_dim > MAX_ACTION_DIM:
        reason = f"at most {MAX_ACTION_DIM} actions per agent (got {shape.action_dim:,})"
        errors.append(FieldError(size_field, reason))
    vector = env.engine == EnvEngine.VECTOR and env.suite == EnvSuite.MPE
    most = min(MAX_ENVS, suite(env.suite).max_envs)
    if not vector and env.num_envs > most:
        reason = (
            f"at most {most} copies on the {_engine_name(env)} (got {env.num_envs:,}); the "
            f"vector engine (env.engine: vector, mpe scenarios) steps up to {MAX_VECTOR_ENVS:,}"
        )
        errors.append(FieldError("env.num_envs", reason))
        return errors
    limit = MAX_VECTOR_AGENT_COPIES if vector else MAX_AGENT_COPIES
    if env.num_envs * shape.num_agents > limit:
        most = max(1, limit // shape.num_agents)
        reason = (
            f"at most {most:,} copies of {env.id} with {shape.num_agents} agents "
            f"({limit:,} agents in all; got {env.num_envs:,})"
        )
        errors.append(FieldError("env.num_envs", reason))
    return errors


def _engine_name(env: EnvSpec) -> str:
    return "mpe2 engine" if env.suite == EnvSuite.MPE else f"{env.suite} suite"


def kwarg_ranges(suite_name: str, env_id: str) -> list[KwargRange]:
    """The bounded constructor arguments of an env (the published spec schema states them)."""
    params = constructor_parameters(suite_name, env_id)
    if suite_name == EnvSuite.MPE:
        ranges = [*MPE_SCENARIOS[env_id].counts, *MPE_RANGES]
    elif suite_name == EnvSuite.GYMNASIUM:
        ranges = list(MUJOCO_RANGES)
    else:
        ranges = list(suite(suite_name).ranges(env_id))
    return [rule for rule in ranges if rule.kwarg in params]


def memory_errors(estimate: MemoryEstimate, budget_mib: int, budget_name: str) -> list[FieldError]:
    """A refusal naming the field of the estimate's largest part, if the estimate is over budget."""
    total = estimate.total_mib
    if total <= budget_mib:
        return []
    reason = (
        f"the run would need about {total:,.0f} MiB ({estimate.describe()}) against the per-run "
        f"budget of {budget_mib:,} MiB ({budget_name})"
    )
    return [FieldError(estimate.largest().field, reason)]


def _env_shape(env: EnvSpec) -> EnvShape | FieldError:
    try:
        return env_shape(env.suite, env.id, env.kwargs)
    except Exception as exc:  # a third-party constructor raises what it likes, for bad kwargs
        return FieldError("env.kwargs", f"{env.id} refuses these arguments: {exc or type(exc)}")


def assess(
    spec: ExperimentSpec, budget_mib: int, *, cpus: int, budget_name: str = "the memory budget"
) -> Assessment:
    """Every limit ``spec`` (from ``parse_spec``) is past, and the memory estimate, on a worker
    with ``cpus`` cores (they decide how many env worker processes it starts)."""
    # ``total_steps`` and layer widths are bounded by the spec's and the config's own fields
    # (``learners.spec.MAX_TOTAL_STEPS``, ``learners.config.MAX_HIDDEN_WIDTH``).
    errors = env_kwarg_errors(spec.env)
    if errors:
        return Assessment(tuple(errors), None)
    shape = _env_shape(spec.env)
    if isinstance(shape, FieldError):
        return Assessment((shape,), None)
    errors = shape_errors(spec.env, shape)
    if errors:
        return Assessment(tuple(errors), None)
    estimate = estimate_memory(spec, shape, cpus=cpus)
    return Assessment(tuple(memory_errors(estimate, budget_mib, budget_name)), estimate)
