"""The experiment spec: the product's main interface, one frozen model shared by API and worker.

Models only: what a spec holds and its field-level bounds. Deciding whether a spec may run
(``parse_spec``, the env and budget checks) is ``learners.admission``'s job. Nothing here imports
a deep-learning framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, ValidationError

from learners.config import AlgorithmConfig
from learners.enums import Algorithm, Backend, Device, EnvEngine
from learners.registry import entry


@dataclass(frozen=True)
class FieldError:
    """One reason a spec was refused: the dotted path of the field and a sentence for a person."""

    field: str
    reason: str


class SpecError(ValueError):
    """A spec that cannot run; ``errors`` names every field at fault."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(f"{e.field}: {e.reason}" for e in self.errors))


_STRICT = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

NO_NUL = "^[^\\x00]*$"
"""Text without the NUL character, which no database text column (nor JSONB) can store."""


NUL_REASON = "must not contain the NUL character (U+0000)"


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError(NUL_REASON)
    return text


Text = Annotated[str, AfterValidator(_no_nul), Field(json_schema_extra={"pattern": NO_NUL})]
"""A string a person typed, stored as text: anything but NUL."""

CONTROL_CHARACTERS = (
    "".join(map(chr, range(0x20)))
    + "".join(map(chr, range(0x7F, 0xA0)))
    + "\u061c\u200e\u200f\u2028\u2029"
    + "".join(map(chr, range(0x202A, 0x202F)))
    + "".join(map(chr, range(0x2066, 0x206A)))
)
"""What a one-line label may not hold: the C0 and C1 control characters (a terminal's escapes,
line breaks, tabs) and the Unicode line separators and bidirectional controls (which reorder what
a terminal or page shows)."""
NO_CONTROL = (
    "^[^\\x00-\\x1f\\x7f-\\x9f\\u061c\\u200e\\u200f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069]*$"
)
LABEL_REASON = (
    "must be one line of printable text: no control characters (U+0000-U+001F, U+007F-U+009F: "
    "terminal escapes, line breaks, tabs), line separators or bidirectional controls"
)


def label_error(text: str) -> str | None:
    """Why ``text`` cannot be a one-line label (``Label``), or None."""
    return LABEL_REASON if any(c in CONTROL_CHARACTERS for c in text) else None


def _no_control(text: str) -> str:
    if (reason := label_error(text)) is not None:
        raise ValueError(reason)
    return text


Label = Annotated[
    str, AfterValidator(_no_control), Field(json_schema_extra={"pattern": NO_CONTROL})
]
"""A one-line name a person typed (a run's, a sweep's, a match's, a key's): printable text only,
so a terminal or a table that shows it shows what it says (``label_error``)."""

TAG_PATTERN = "^[A-Za-z0-9_.:-]+$"
MAX_TAG_LENGTH = 50
MAX_TAGS = 20
MAX_NOTES_LENGTH = 10_000


def _unique(tags: list[str]) -> list[str]:
    return list(dict.fromkeys(tags))


Tag = Annotated[str, Field(min_length=1, max_length=MAX_TAG_LENGTH, pattern=TAG_PATTERN)]
"""A label: letters, digits and ``_ . : -`` (``lr:3e-4``, ``baseline``, ``paper.fig2``)."""
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS), AfterValidator(_unique)]
"""A run's labels, a repeated one kept once, in the order given."""
Notes = Annotated[Text, Field(max_length=MAX_NOTES_LENGTH)]
"""Free text about a run."""

MAX_TOTAL_STEPS = 100_000_000
"""Environment steps per run. At the 300-3,000 env steps/s these learners train at
(docs/learners.md), more would outlast the run time limit (48 h by default) anyway."""
MAX_VECTOR_ENVS = 4096
"""The most copies ``env.num_envs`` may ask for: on the vector engine (``learners.admission.budget``
holds the other engines to fewer)."""


# The pydantic mypy plugin's synthesised __init__ has a ``**kwargs`` beside the ``kwargs`` field.
class EnvSpec(BaseModel):  # type: ignore[no-redef]
    """Which environment to train on and how many copies to step together."""

    model_config = _STRICT

    suite: str = Field(min_length=1, max_length=40, pattern=r"^[a-z][a-z0-9_]*$")
    """The environment suite: a built-in one (``gymnasium``, ``mpe``, ``sisl``, ``mamujoco``,
    ``lbf``, ``rware``) or one an installed plugin registers (``GET /v1/environments`` lists
    them)."""
    id: str = Field(min_length=1, max_length=100)
    """The environment id, e.g. ``Pendulum-v1`` or ``simple_spread_v3``."""
    num_envs: int = Field(default=1, ge=1, le=MAX_VECTOR_ENVS)
    """How many copies of the environment step in lockstep, batched into one array: up to 4,096
    on the vector engine, 256 otherwise (``learners.admission.budget``)."""
    kwargs: dict[str, JsonValue] = Field(default_factory=dict)
    """Keyword arguments for the environment's own constructor (mpe2's ``N``, Pendulum's ``g``)."""
    engine: EnvEngine = EnvEngine.MPE2
    """``mpe`` only: what steps the scenario. ``vector`` (the default for ``mpe`` specs that leave
    it out) is MARLForge's array implementation of the scenarios (``learners/envs/vector``), equal
    to mpe2 step for step and from the same seeds, and many times faster; ``mpe2`` is the
    reference library. Replays and matches play on mpe2 either way. A ``gymnasium`` spec may not
    ask for ``vector``."""


MAX_EVAL_ENVS = 16
"""Evaluation episodes play on at most this many env copies at once."""


class EvaluationSpec(BaseModel):
    """Periodic evaluation of the deterministic (greedy) policy on separate environments."""

    model_config = _STRICT

    every_steps: int = Field(default=5000, ge=1)
    """Evaluate after every this many environment steps (and once at the end)."""
    episodes: int = Field(default=5, ge=1, le=1000)
    """How many episodes each evaluation runs; ``eval/episode_return`` is their mean."""


class CheckpointSpec(BaseModel):
    """How often the learner's full state is saved, and how many checkpoints are kept."""

    model_config = _STRICT

    every_steps: int = Field(default=5000, ge=1)
    """Save a checkpoint after every this many environment steps (and once at the end)."""
    keep_last: int = Field(default=3, ge=1, le=1000)
    """Keep only the newest this many checkpoints (and the best, see ``keep_best``); older files
    are deleted."""
    keep_best: bool = True
    """Also keep the checkpoint with the highest evaluation return (``eval/episode_return`` taken
    at its step), however old: a run that peaks and then drifts keeps its best policy. Only a
    checkpoint taken at an evaluation's step has a return, so make ``evaluation.every_steps``
    equal to ``every_steps`` (the default) or a divisor of it."""


RUN_ID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}$"
"""A run's or a checkpoint's id: a ULID in Crockford's base 32 (``core.ids``)."""


class InitSpec(BaseModel):
    """A warm start: the run begins from a checkpoint of another run of the same project instead
    of fresh networks (fine-tuning, a curriculum, more steps on a variant of the env). Checked at
    submission: the same algorithm, an env of the same spaces (agents, teams, observation, state
    and action sizes) and the same network hyperparameters; the backend may differ."""

    model_config = _STRICT

    experiment_id: str = Field(pattern=RUN_ID_PATTERN)
    """The run to start from: one of this project's."""
    checkpoint_id: str = Field(default="latest", pattern=r"^(best|latest|[0-9A-HJKMNP-TV-Z]{26})$")
    """Which of its checkpoints: ``latest``, ``best`` (the highest evaluation return) or a
    checkpoint's id. The service resolves ``latest`` and ``best`` at submission: the stored spec
    names the checkpoint the run starts from."""
    what: Literal["policy", "all", "run"] = "policy"
    """``policy``: the acting network (and its target copy); the critics, mixers and optimisers
    start fresh. ``all``: every network, the optimisers' moments and the value normaliser. Either
    way the run keeps its own seed's generators and schedules, an empty buffer and its own step
    axis from 0. ``run``: the run **continues** the checkpoint's run, as a resume does (every
    network, generator, counter and buffer, on its step axis from the checkpoint's step), with a
    larger ``total_steps`` and its own ``schedule`` from that step on; the spec must describe
    that run up to the checkpoint (the same seed, env, hyperparameters and schedule before it),
    so that the same spec without ``init`` trains the same weights in one run."""


MAX_SCHEDULE_CHANGES = 1000
"""Entries of a spec's ``schedule``."""


class ScheduleChange(BaseModel):
    """New values of some hyperparameters from one step of the run on."""

    model_config = _STRICT

    at_step: int = Field(gt=0, le=MAX_TOTAL_STEPS)
    """The env step from which the values hold: the run's first update after this step takes
    them. A multiple of the steps between updates (``env.num_envs`` × ``rollout_length`` on
    policy, ``env.num_envs`` off policy), below ``total_steps``."""
    hyperparameters: dict[str, Any] = Field(min_length=1)
    """The new values: only the algorithm's mutable hyperparameters (``GET /v1/algorithms``
    lists them: step sizes, coefficients, exploration), never what shapes a network or a
    buffer."""


class SpecEnvelope(BaseModel):
    """The spec as submitted, before the algorithm-specific checks; ``hyperparameters`` is raw."""

    model_config = _STRICT

    name: Label = Field(min_length=1, max_length=200)
    """A label for people; not unique (one line of printable text)."""
    tags: Tags = Field(default_factory=list)
    """Labels to find the run by (``GET /v1/experiments?tag=``): at most 20, each 1-50 of
    ``A-Z a-z 0-9 _ . : -``; a repeated tag is kept once. Editable later (``PATCH``)."""
    notes: Notes = ""
    """Free text for people (up to 10,000 characters): what the run tries, what came of it.
    Editable later (``PATCH``)."""
    algorithm: Algorithm
    """The learning algorithm (see ``GET /v1/algorithms``)."""
    backend: Backend
    """The deep-learning framework that runs it."""
    env: EnvSpec
    """The environment."""
    total_steps: int = Field(gt=0, le=MAX_TOTAL_STEPS)
    """The training budget in environment steps, counted over all parallel envs."""
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """Seeds the networks, the exploration and the environments: a spec always trains the same."""
    device: Device = Device.AUTO
    """``auto`` uses CUDA when the worker has it; ``cuda`` never falls back to the CPU: the service
    queues it for a GPU worker of its backend only, and refuses it for a backend that cannot use a
    GPU (``mindspore``, installed as its CPU build). A PyTorch MAPPO or IPPO run on the vector
    engine with 2,048 copies or more that gets a GPU steps its env there too, and keeps the
    observations on it."""
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    """Values for the algorithm's config class; omitted ones take its (per-environment) defaults."""
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    """Periodic evaluation."""
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    """Periodic checkpoints."""
    max_restarts: int = Field(default=3, ge=0, le=100)
    """How many times the run is restarted from its latest checkpoint after losing its worker (a
    killed or preempted machine); one more loss fails it. ``0`` fails it at the first loss."""
    fail_on_nonfinite_loss: bool = True
    """Fail the run at the first update whose loss is NaN or infinite, with the reason
    ``non-finite loss at step N: learner/<name> = nan``; ``false`` trains on regardless (such a
    value is stored as ``null``)."""
    init: InitSpec | None = None
    """Start from another run's checkpoint (a warm start, or ``what: run`` to continue it)
    instead of fresh networks; omitted: a fresh start."""
    schedule: list[ScheduleChange] = Field(default_factory=list, max_length=MAX_SCHEDULE_CHANGES)
    """Hyperparameters that change during the run, in increasing ``at_step`` order (a PBT
    member's schedule, ``core.sweeps.pbt``); empty: ``hyperparameters`` hold throughout."""


class SpecEdit(BaseModel):
    """What may change on a stored spec: its labels, never what the run trains
    (``PATCH /v1/experiments/{id}``). Only the fields given change."""

    model_config = _STRICT

    name: Label = Field(default="", min_length=1, max_length=200)
    """A new name."""
    tags: Tags = Field(default_factory=list)
    """New tags: the whole list (``[]`` removes them all)."""
    notes: Notes = ""
    """New notes: the whole text."""


EDITABLE = tuple(SpecEdit.model_fields)


class ExperimentSpec(SpecEnvelope):
    """A validated spec: the pair is built, the env exists and takes its kwargs, and
    ``hyperparameters`` holds the algorithm's full config with defaults filled in."""

    def config(self) -> AlgorithmConfig:
        """The typed, frozen config this spec's hyperparameters describe."""
        return entry(self.algorithm).config.model_validate(self.hyperparameters)

    def config_at(self, step: int) -> AlgorithmConfig:
        """The config the run trains with from env step ``step`` on: ``hyperparameters`` with
        every ``schedule`` change at or before ``step``."""
        values = dict(self.hyperparameters)
        for change in self.schedule:
            if change.at_step <= step:
                values.update(change.hyperparameters)
        return entry(self.algorithm).config.model_validate(values)


def _dotted(prefix: str, loc: Sequence[int | str]) -> str:
    parts = [prefix] if prefix else []
    parts.extend(str(p) for p in loc)
    return ".".join(parts) or "body"


def errors_from_validation(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    """Pydantic's errors as ``FieldError``s, their locations under ``prefix``."""
    return [FieldError(_dotted(prefix, e["loc"]), _reason(e)) for e in exc.errors()]


def _reason(error: Any) -> str:
    # A validator's own sentence, without pydantic's "Value error, " in front of it.
    if error.get("type") == "value_error" and "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])
    return str(error["msg"])
