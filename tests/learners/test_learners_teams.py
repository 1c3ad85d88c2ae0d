"""Teams: the env layer names each agent's side from the real mpe2 agents, the catalogue's table
agrees with the built envs, checkpoints carry the teams (old ones without them still load and
resume), and an algorithm that learns one team reward (WQMIX) is refused a scenario with two."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learners import checkpoint
from learners.admission.envs import trains_on
from learners.admission.parse import parse_spec
from learners.admission.schema import spec_json_schema
from learners.enums import ActionKind, Algorithm, EnvSuite
from learners.envs.catalogue import MPE_ENVS, MPE_TEAMS, scenario_teams
from learners.envs.catalogue import suite as catalogue_suite
from learners.envs.gymnasium_env import GymnasiumVecEnv
from learners.envs.mpe import MPEVecEnv
from learners.envs.teams import team_members, team_of, team_returns
from learners.registry import entries, entry
from learners.spec import SpecError

# What mpe2 names the agents of each scenario with its default kwargs.
MPE_AGENTS = {
    "simple_spread_v3": ("agent_0", "agent_1", "agent_2"),
    "simple_adversary_v3": ("adversary_0", "agent_0", "agent_1"),
    "simple_push_v3": ("adversary_0", "agent_0"),
    "simple_tag_v3": ("adversary_0", "adversary_1", "adversary_2", "agent_0"),
    "simple_v3": ("agent_0",),
    "simple_speaker_listener_v4": ("speaker_0", "listener_0"),
    "simple_reference_v3": ("agent_0", "agent_1"),
    "simple_world_comm_v3": (
        "leadadversary_0", "adversary_0", "adversary_1", "adversary_2", "agent_0", "agent_1",
    ),
    "simple_crypto_v3": ("eve_0", "bob_0", "alice_0"),
    "simple_formation_v1": ("agent_0", "agent_1", "agent_2", "agent_3"),
    "simple_line_v1": ("agent_0", "agent_1", "agent_2", "agent_3"),
    "collect_treasure_v1": (
        "collector_0", "collector_1", "collector_2", "collector_3", "collector_4", "collector_5",
        "deposit_0", "deposit_1",
    ),
}  # fmt: skip
# Who plays with whom where the names alone do not say it (the rest: the name without its index).
MPE_ROLES = {
    "speaker": "agent", "listener": "agent", "leadadversary": "adversary", "eve": "adversary",
    "alice": "agent", "bob": "agent", "collector": "agent", "deposit": "agent",
}  # fmt: skip


def test_team_of_strips_the_index() -> None:
    assert [team_of(a) for a in ("adversary_12", "agent_0", "agent")] == [
        "adversary",
        "agent",
        "agent",
    ]


@pytest.mark.parametrize("env_id", MPE_ENVS)
def test_mpe_teams_come_from_the_real_agent_names(env_id: str) -> None:
    env = catalogue_suite("mpe").factory(env_id, {}, 0, False)(1, first_copy=0)
    info = env.info
    env.close()
    assert info.agent_ids == MPE_AGENTS[env_id]
    names = [a.rsplit("_", 1)[0] for a in MPE_AGENTS[env_id]]
    assert info.teams == tuple(MPE_ROLES.get(n, n) for n in names)
    assert info.team_names == MPE_TEAMS[env_id] == scenario_teams(EnvSuite.MPE, env_id)
    # The listing (read without building an env) says what the built env says.
    listed = catalogue_suite("mpe").entry(env_id)
    assert listed.teams == info.teams
    assert listed.groups == (info.groups or info.teams)


def test_the_catalogue_table_covers_every_scenario() -> None:
    assert set(MPE_TEAMS) == set(MPE_ENVS)


def test_more_agents_keep_the_two_sides() -> None:
    env = MPEVecEnv("simple_tag_v3", {"num_good": 2, "num_adversaries": 1}, 1, seed=0)
    env.close()
    assert env.info.teams == ("adversary", "agent", "agent")


def test_a_gymnasium_env_is_one_team() -> None:
    env = GymnasiumVecEnv("Pendulum-v1", {}, 1, seed=0)
    env.close()
    assert env.info.teams == ("agent",)
    assert scenario_teams(EnvSuite.GYMNASIUM, "Pendulum-v1") == ("agent",)


def test_team_returns_are_means_over_each_team() -> None:
    members = team_members(("adversary", "adversary", "agent"))
    returns = team_returns(members, np.array([1.0, 3.0, -5.0]))
    assert returns == {"adversary": 2.0, "agent": -5.0}


# -- checkpoints -----------------------------------------------------------------------------------


def _tag_info() -> checkpoint.EnvInfo:
    env = MPEVecEnv("simple_tag_v3", {}, 2, seed=0)
    env.close()
    return env.info


def test_the_manifest_round_trips_the_teams() -> None:
    info = _tag_info()
    data = checkpoint.env_info_to_json(info)
    assert data["teams"] == ["adversary", "adversary", "adversary", "agent"]
    assert checkpoint.env_info_from_json(data).teams == info.teams
    assert checkpoint.same_env(data, info)


def test_a_manifest_without_teams_is_one_team_and_resumes_on_its_env() -> None:
    info = _tag_info()
    old = checkpoint.env_info_to_json(info)
    del old["teams"]
    assert checkpoint.env_info_from_json(old).teams == ("agent",) * 4
    assert checkpoint.same_env(old, info)


def test_a_manifest_with_other_teams_or_shapes_is_another_env() -> None:
    info = _tag_info()
    data = checkpoint.env_info_to_json(info)
    assert not checkpoint.same_env({**data, "teams": ["agent"] * 4}, info)
    old = {k: v for k, v in data.items() if k != "teams"}
    assert not checkpoint.same_env({**old, "obs_dim": 99}, info)


# -- algorithms that learn one team reward ---------------------------------------------------------


def _spec(algorithm: Algorithm, env_id: str) -> dict[str, Any]:
    continuous = ActionKind.DISCRETE not in entry(algorithm).action_kinds
    return {
        "name": "teams",
        "algorithm": algorithm,
        "backend": "torch",
        "env": {"suite": "mpe", "id": env_id, "kwargs": {"continuous_actions": continuous}},
        "total_steps": 1000,
    }


@pytest.mark.parametrize("env_id", [i for i in MPE_ENVS if len(MPE_TEAMS[i]) > 1])
def test_wqmix_refuses_a_scenario_with_two_teams(env_id: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_spec(Algorithm.WQMIX, env_id))
    (error,) = caught.value.errors
    assert error.field == "env.id"
    assert error.reason.startswith(
        f"WQMIX learns one team reward; {env_id} has two teams (adversary, agent)"
    )
    assert "simple_spread_v3" in error.reason and "MADDPG" in error.reason
    assert not trains_on(entry(Algorithm.WQMIX), EnvSuite.MPE, env_id)


def test_wqmix_trains_on_the_cooperative_scenario() -> None:
    assert parse_spec(_spec(Algorithm.WQMIX, "simple_spread_v3")).env.id == "simple_spread_v3"


def test_the_refusal_comes_with_the_other_errors_of_the_env() -> None:
    spec = _spec(Algorithm.WQMIX, "simple_tag_v3")
    spec["env"]["kwargs"]["bogus"] = 1
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert [e.field for e in caught.value.errors] == ["env.id", "env.kwargs.bogus"]


@pytest.mark.parametrize(
    "algorithm", [e.algorithm for e in entries() if EnvSuite.MPE in e.suites and not e.one_team]
)
def test_per_agent_algorithms_accept_every_scenario(algorithm: Algorithm) -> None:
    for env_id in MPE_ENVS:
        assert parse_spec(_spec(algorithm, env_id)).env.id == env_id


def test_the_published_schema_leaves_the_refused_scenarios_out() -> None:
    schema, _ = spec_json_schema()
    variants = {v["properties"]["algorithm"]["const"]: v for v in schema["oneOf"]}

    def env_ids_of(algorithm: str) -> list[str]:
        envs = variants[algorithm]["properties"]["env"]["oneOf"]
        return [e["properties"]["id"]["const"] for e in envs]

    cooperative = [i for i in MPE_ENVS if len(MPE_TEAMS[i]) == 1]
    assert [i for i in env_ids_of("wqmix") if i in MPE_ENVS] == cooperative
    assert [i for i in env_ids_of("maddpg") if i in MPE_ENVS] == list(MPE_ENVS)
