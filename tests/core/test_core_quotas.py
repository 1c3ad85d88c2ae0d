"""Spec bounds at submission (core.quotas): refusals name the field and this deployment's budget,
and the budget comes from the settings (MARLFORGE_RUN_MEMORY_MB)."""

from __future__ import annotations

from typing import Any

import pytest

from core.quotas import BUDGET_VARIABLE, check_spec_bounds, run_memory_estimate
from core.settings import Settings
from learners.admission.parse import parse_spec
from learners.spec import ExperimentSpec, SpecError


def spec_of(
    env: dict[str, Any], algorithm: str = "maddpg", **hyperparameters: Any
) -> ExperimentSpec:
    return parse_spec(
        {
            "name": "quota",
            "algorithm": algorithm,
            "backend": "torch",
            "env": env,
            "total_steps": 100_000,
            "hyperparameters": hyperparameters,
        }
    )


SPREAD = {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 4}


def refused(spec: ExperimentSpec, settings: Settings) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        check_spec_bounds(spec, settings)
    return {e.field: e.reason for e in caught.value.errors}


def test_the_budget_variable_is_the_settings_own() -> None:
    assert BUDGET_VARIABLE == "MARLFORGE_RUN_MEMORY_MB"


def test_five_thousand_agents_are_refused_naming_the_kwarg() -> None:
    spec = spec_of({**SPREAD, "kwargs": {"N": 5000}}, algorithm="mappo")
    assert refused(spec, Settings()) == {
        "env.kwargs.N": "at most 32 agents on simple_spread_v3 (got 5000)"
    }
    assert run_memory_estimate(spec, Settings()) is None


def test_a_huge_buffer_is_refused_against_the_configured_budget() -> None:
    found = refused(spec_of(SPREAD, buffer_size=10_000_000), Settings(run_memory_mb=4096))
    assert list(found) == ["hyperparameters.buffer_size"]
    assert "replay buffer" in found["hyperparameters.buffer_size"]
    assert found["hyperparameters.buffer_size"].endswith(
        "against the per-run budget of 4,096 MiB (MARLFORGE_RUN_MEMORY_MB)"
    )


def test_a_lower_budget_refuses_what_the_default_accepts() -> None:
    spec = spec_of(SPREAD, buffer_size=2_000_000)  # about 1.2 GiB of replay
    check_spec_bounds(spec, Settings())
    estimate = run_memory_estimate(spec, Settings())
    assert estimate is not None and 1024 < estimate.total_mib < Settings().run_memory_mb
    found = refused(spec, Settings(run_memory_mb=1024))
    assert list(found) == ["hyperparameters.buffer_size"]
    assert "budget of 1,024 MiB (MARLFORGE_RUN_MEMORY_MB)" in found["hyperparameters.buffer_size"]


def test_the_budget_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_of(SPREAD, buffer_size=2_000_000)
    monkeypatch.setenv("MARLFORGE_RUN_MEMORY_MB", "1024")
    assert list(refused(spec, Settings())) == ["hyperparameters.buffer_size"]


def test_the_estimate_is_its_parts() -> None:
    estimate = run_memory_estimate(spec_of(SPREAD, algorithm="mappo"), Settings())
    assert estimate is not None
    parts = estimate.as_dict()
    assert list(parts) == ["rollout buffer", "networks", "update", "envs", "runtime", "total"]
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    assert parts["runtime"] > 0 and parts["envs"] > 0
