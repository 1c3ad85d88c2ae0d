"""The base of every algorithm's hyperparameter class.

Each algorithm has one typed, frozen config class (``learners/algorithms/<name>.py``). The API
schema, the worker and every backend use that same class: the API validates a spec's
``hyperparameters`` against it, the stored spec holds it with every default filled in, and the
learners read it.

A field's docstring is its description (pydantic's ``use_attribute_docstrings``), so the catalogue
the API serves and the dashboard's form show exactly what the code says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field

MAX_HIDDEN_WIDTH = 2048
"""Units per hidden layer: 8 to 32 times the defaults (64 and 256)."""
LayerWidth = Annotated[int, Field(strict=True, ge=1, le=MAX_HIDDEN_WIDTH)]
"""The units of one hidden layer (``hidden_sizes: tuple[LayerWidth, ...]``)."""


class AlgorithmConfig(BaseModel):
    """Hyperparameters of one algorithm. Subclasses declare fields with a docstring each."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        strict=False,
        validate_default=True,
    )

    # Defaults that differ per environment, keyed by env id (or "suite:*" for a whole suite).
    # They are applied before the user's values, so a user can still override each of them.
    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    # What a warm start (``spec.init``) needs equal to its parent's: the hyperparameters that
    # shape or define the acting network (``what: policy``) and every network, the optimisers'
    # state and the value normaliser included (``what: all``). tests/learners/test_warm_start.py
    # checks that no other field changes a tensor's name or shape.
    policy_fields: ClassVar[tuple[str, ...]] = ()
    network_fields: ClassVar[tuple[str, ...]] = ()

    # What a run may change while it trains (``spec.schedule``; a PBT search's explore step,
    # ``core.sweeps.pbt``): hyperparameters that only the learner reads, at each update, and
    # that shape no tensor. The runners read the others (rollout_length, batch_size, buffer
    # sizes, learning_starts, updates_per_step), and the network fields size the state.
    # tests/learners/test_schedule.py checks that none of these changes a tensor's name or shape.
    mutable_fields: ClassVar[tuple[str, ...]] = ()
    # Fields that, when true, tie what a run does at a step to its ``total_steps`` (PPO's linear
    # step-size decay): a run continued with a larger budget would not do what one run of that
    # budget does, so a PBT search refuses them (its schedule sets the step size instead).
    horizon_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def defaults_for(cls, suite: str, env_id: str) -> dict[str, Any]:
        """The per-environment defaults for ``env_id`` (an exact id wins over a suite wildcard)."""
        merged: dict[str, Any] = dict(cls.env_defaults.get(f"{suite}:*", {}))
        merged.update(cls.env_defaults.get(env_id, {}))
        return merged

    @classmethod
    def resolve(cls, suite: str, env_id: str, given: Mapping[str, Any]) -> Self:
        """Validate ``given`` over the environment's defaults; raises pydantic's ValidationError.

        Strictly, as JSON: a submitted ``true`` or ``"3"`` is not an integer and ``64.0`` not a
        layer size, as the published schema says (lax validation would take them for 1, 3, 64).
        """
        merged = {**cls.defaults_for(suite, env_id), **given}
        return cls.model_validate_json(json.dumps(merged), strict=True)
