"""The published spec schema says what the server enforces. Specs drawn from the schema itself (by
schemathesis' generator, the one the fuzzer uses) are accepted, or refused only by the rules the
schema's description lists as beyond any JSON Schema: rules between two fields (among them `cuda`
with a backend that cannot use a GPU) and the per-run limits that depend on several fields (the
memory estimate, agents over two arguments, copies times agents, the checkpoints written and
kept) or on the environment's own constructor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.integration

# (field prefix, words of the reason) of every refusal a schema-valid spec may still get.
BEYOND_THE_SCHEMA = [
    ("hyperparameters.", "MARLFORGE_RUN_MEMORY_MB"),  # the memory estimate, named by its part
    ("env.", "MARLFORGE_RUN_MEMORY_MB"),
    ("backend", "MARLFORGE_RUN_MEMORY_MB"),
    ("env.num_envs", "copies of"),  # copies times agents
    ("env.kwargs.", "agents on"),  # agents counted over two arguments
    ("env.kwargs.", "grid"),  # pursuit's agents on its grid (two sizes, two counts)
    ("env.kwargs", "refuses these arguments"),  # the scenario's own constructor
    ("hyperparameters.minibatches", "cannot exceed rollout_length"),
    ("hyperparameters.chunk_length", "cannot exceed rollout_length"),
    ("hyperparameters.episode_buffer_size", "must hold at least episode_batch_size"),
    ("device", "backend cannot use a GPU"),  # cuda on a backend without one (mindspore)
    ("checkpoint.every_steps", "MARLFORGE_RUN_MAX_CHECKPOINTS"),  # total_steps / every_steps
    ("checkpoint.keep_last", "MARLFORGE_RUN_MAX_CHECKPOINT_MB"),  # kept times a checkpoint's size
    ("init.experiment_id", "in this project"),  # a warm start names a run the project must have
    # A schedule's changes against the rest of the spec: steps against total_steps and the
    # steps between updates, names and values against the algorithm's mutable hyperparameters.
    ("schedule.", "below total_steps"),
    ("schedule.", "multiple of"),
    ("schedule.", "must increase"),
    ("schedule.", "is not a hyperparameter of"),
    ("schedule.", "cannot change during a run of"),
    ("schedule.", "Input should"),
]


@pytest.fixture
def spacious(member_client_with: Callable[..., TestClient]) -> TestClient:
    """A member client on an app without practical quotas (the test submits many specs)."""
    return member_client_with(project_max_active_runs=10**6, project_submissions_per_minute=10**6)


def test_specs_drawn_from_the_schema_are_refused_only_beyond_it(spacious: TestClient) -> None:
    schema = schemathesis.openapi.from_dict(spacious.get("/openapi.json").json())
    operation = schema["/v1/experiments"]["POST"]
    outcomes: list[int] = []

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=operation.as_strategy())
    def submit(case: Any) -> None:
        response = spacious.post("/v1/experiments", json=case.body)
        outcomes.append(response.status_code)
        if response.status_code == 201:
            return
        assert response.status_code == 422, response.text
        for problem in response.json()["error"]["fields"]:
            assert any(
                problem["field"].startswith(prefix) and words in problem["reason"]
                for prefix, words in BEYOND_THE_SCHEMA
            ), (case.body, problem)

    submit()
    # The schema is not so loose that nearly everything drawn from it is refused.
    assert outcomes.count(201) >= len(outcomes) // 2, outcomes
