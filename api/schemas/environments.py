"""The bodies of ``/v1/environments``: the installed suites and what each id takes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


# The pydantic mypy plugin's synthesised __init__ has a ``**kwargs`` beside the ``kwargs`` field.
class EnvironmentIdOut(BaseModel):  # type: ignore[no-redef]
    """One env id of a suite."""

    id: str
    summary: str
    agents: int = Field(description="How many agents it has with its default arguments.")
    teams: list[str] = Field(
        description="Each agent's team with the default arguments, in agent order: who plays "
        "with whom (a scenario with several teams reports `eval/episode_return/<team>`)."
    )
    groups: list[str] = Field(
        description="Each agent's group, in agent order: agents of one group share observation "
        "and action spaces (simple_speaker_listener's `speaker` and `listener` are two groups of "
        "one team)."
    )
    action_kinds: list[str] = Field(
        description="`discrete`, `continuous` or both (then a kwarg, `action_kind_kwarg`, chooses)."
    )
    action_kind_kwarg: str | None = Field(
        description="The constructor argument that picks the action kind, if one does."
    )
    kwargs: dict[str, Any] = Field(
        description="JSON Schema of each constructor argument a spec may set in `env.kwargs`: "
        "its type, default and, for a bounded one, its range."
    )
    algorithms: list[str] = Field(description="The algorithms that train on it.")


class SuiteOut(BaseModel):
    """An installed suite of environments."""

    suite: str = Field(description="What a spec's `env.suite` says.")
    title: str
    summary: str
    multi_agent: bool = Field(
        description="Multi-agent algorithms train on multi-agent suites, DDPG on the others."
    )
    builtin: bool = Field(description="Shipped with MARLForge (false: an installed plugin).")
    reserved_kwargs: dict[str, str] = Field(
        description="Constructor arguments no spec may set, with the reason."
    )
    max_envs: int = Field(description="The most copies (`env.num_envs`) a spec may ask for.")
    environments: list[EnvironmentIdOut]


class EnvironmentCatalogue(BaseModel):
    """Every suite this API can validate specs for."""

    suites: list[SuiteOut]
    plugin_errors: dict[str, str] = Field(
        description="Entry points of the `marlforge.environments` group that did not load on the "
        "API, with the reason (an operator's broken plugin is left out, not fatal)."
    )
