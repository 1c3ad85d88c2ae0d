"""``/v1/algorithms``: what can be trained, on which backends and environments, with which
hyperparameters. The dashboard builds its "new run" form from it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.schemas.catalogue import AlgorithmOut, EnvironmentOut
from learners.api import (
    MATCH_SCENARIOS,
    ActionKind,
    AlgorithmEntry,
    Backend,
    entries,
    env_ids,
    scenario_teams,
    suite,
    trains_on,
)

router = APIRouter(prefix="/v1", tags=["catalogue"])


def _kwargs(algo: AlgorithmEntry, suite_name: str, env_id: str) -> dict[str, Any]:
    # mpe2 picks discrete or continuous actions by a constructor flag; the default is discrete.
    flag = suite(suite_name).action_kind_field(env_id)
    if flag is not None and ActionKind.DISCRETE not in algo.action_kinds:
        return {flag: True}
    return {}


def _environments(algo: AlgorithmEntry) -> list[EnvironmentOut]:
    out = []
    for suite_name in sorted(algo.suites):
        for env_id in env_ids(suite_name):
            if not trains_on(algo, suite_name, env_id):
                continue
            defaults = algo.config.resolve(suite_name, env_id, {}).model_dump(mode="json")
            out.append(
                EnvironmentOut(
                    suite=suite_name,
                    id=env_id,
                    teams=list(scenario_teams(suite_name, env_id)),
                    matches=suite_name == "mpe" and env_id in MATCH_SCENARIOS,
                    groups=list(dict.fromkeys(suite(suite_name).entry(env_id).groups)),
                    env_kwargs=_kwargs(algo, suite_name, env_id),
                    hyperparameter_defaults=defaults,
                    env_defaults=algo.env_defaults_for(suite_name, env_id),
                )
            )
    return out


@router.get(
    "/algorithms",
    response_model=list[AlgorithmOut],
    summary="List algorithms",
    description="Every algorithm, the backends it is built for, the environments it trains on "
    "(with each one's hyperparameter defaults), and the JSON Schema of its hyperparameters (each "
    "with its description and default).",
)
def list_algorithms() -> list[AlgorithmOut]:
    return [
        AlgorithmOut(
            algorithm=e.algorithm,
            title=e.title,
            summary=e.summary,
            multi_agent=e.multi_agent,
            backends=[b for b in Backend if b in e.backends],
            all_backends=list(Backend),
            suites=sorted(e.suites),
            environments=_environments(e),
            hyperparameters=e.config.model_json_schema(),
            mutable_hyperparameters=list(e.config.mutable_fields),
        )
        for e in entries()
    ]
