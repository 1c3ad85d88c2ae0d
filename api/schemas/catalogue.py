"""The bodies of ``GET /v1/algorithms`` (``api.routes.catalogue``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from learners.api import Backend


class EnvironmentOut(BaseModel):
    """An environment an algorithm trains on, and what changes when it is picked."""

    suite: str
    id: str
    teams: list[str] = Field(
        description="The sides its agents play on, in agent order (mpe2 names them: `adversary` "
        "against `agent` in the competitive scenarios; `agent` alone in cooperative ones and "
        "Gymnasium). A scenario with several teams reports `train/episode_return/<team>` and "
        "`eval/episode_return/<team>` beside the returns over all agents."
    )
    matches: bool = Field(
        description="Whether matches are played on it (`POST /v1/matches`): the competitive mpe "
        "scenarios whose teams are scored."
    )
    groups: list[str] = Field(
        description="Each agent's group, in agent order: agents of one group share observation "
        "and action spaces (`GET /v1/environments` says more about each env)."
    )
    env_kwargs: dict[str, Any] = Field(
        description="Constructor arguments the algorithm needs on this env (e.g. mpe2's "
        "`continuous_actions`); put them in the spec's `env.kwargs`."
    )
    hyperparameter_defaults: dict[str, Any] = Field(
        description="Every hyperparameter's default on this env (the algorithm's defaults with "
        "the per-environment ones applied)."
    )
    env_defaults: dict[str, Any] = Field(
        description="What a spec on this env gets for `env.num_envs` and `env.kwargs` entries it "
        "leaves out: the settings the algorithm's results were measured with "
        "(docs/results/2026-11-27-fresh-seed-targets.md summarises them; e.g. "
        '`{"num_envs": 8, "kwargs": {"continuous_actions": true}}` for MADDPG on MPE); '
        "`num_envs` is 1 where absent."
    )


class AlgorithmOut(BaseModel):
    """An algorithm of the catalogue and its hyperparameters."""

    algorithm: str
    title: str
    summary: str
    multi_agent: bool
    backends: list[Backend] = Field(
        description="The backends it is built for, in the order of `all_backends` (a spec naming "
        "another is refused)."
    )
    all_backends: list[Backend] = Field(description="Every backend MARLForge knows.")
    suites: list[str] = Field(description="The installed environment suites it trains on.")
    environments: list[EnvironmentOut] = Field(description="Every environment it trains on.")
    hyperparameters: dict[str, Any] = Field(
        description="JSON Schema of its hyperparameters: each property's `description` is the "
        "config field's docstring and its `default` the default on no particular env."
    )
    mutable_hyperparameters: list[str] = Field(
        description="The hyperparameters a run may change while it trains: a spec's `schedule` "
        "and a PBT search's explore step may set these and no others (the rest shape a network "
        "or a buffer, or are read by the training loop)."
    )
