"""``/v1/environments``: the installed environment suites, read from their adapters (the built-in
ones and any plugin registered under the ``marlforge.environments`` entry-point group)."""

from __future__ import annotations

from api.auth import project_router
from api.schemas.environments import EnvironmentCatalogue, EnvironmentIdOut, SuiteOut
from learners.api import (
    EnvSuite,
    Suite,
    entries,
    kwargs_properties,
    plugin_errors,
    suites,
    trains_on,
)

# Any key may read it (it is the same for every project); not open to all, since it names the
# modules of plugins that failed to load.
router = project_router("/v1/environments", ["catalogue"])


def _environment(env_suite: Suite, env_id: str) -> EnvironmentIdOut:
    listed = env_suite.entry(env_id)
    return EnvironmentIdOut(
        id=env_id,
        summary=listed.summary,
        agents=len(listed.teams),
        teams=list(listed.teams),
        groups=list(listed.groups),
        action_kinds=sorted(listed.action_kinds),
        action_kind_kwarg=env_suite.action_kind_field(env_id),
        kwargs=kwargs_properties(env_suite, env_id),
        algorithms=[str(e.algorithm) for e in entries() if trains_on(e, env_suite.name, env_id)],
    )


def _suite(env_suite: Suite) -> SuiteOut:
    return SuiteOut(
        suite=env_suite.name,
        title=env_suite.title,
        summary=env_suite.summary,
        multi_agent=env_suite.multi_agent,
        builtin=env_suite.name in set(EnvSuite),
        reserved_kwargs=dict(env_suite.reserved),
        max_envs=env_suite.max_envs,
        environments=[_environment(env_suite, i) for i in env_suite.ids()],
    )


@router.get(
    "",
    response_model=EnvironmentCatalogue,
    summary="List environment suites",
    description="Every installed environment suite (built-in and plugins) with its ids: their "
    "agents, teams and groups, action kinds, the constructor arguments a spec may set (with "
    "types, defaults and bounds), the reserved ones, and the algorithms that train on each.",
)
def list_environments() -> EnvironmentCatalogue:
    return EnvironmentCatalogue(suites=[_suite(s) for s in suites()], plugin_errors=plugin_errors())
