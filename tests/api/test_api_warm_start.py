"""Warm starts at submission (``spec.init``, ``core.experiments.warm_start``): the parent run and
checkpoint are found in the project and resolved (``latest``, ``best``), the spec's fit checked, the
stored spec and the record name the checkpoint; every misfit is a 422 naming the field, nothing
stored; another project's run is not found; a sweep's base warm-starts each of its runs; the named
checkpoint survives its run's pruning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.experiments.checkpoints import CheckpointRepository
from core.experiments.repository import ExperimentRepository
from core.models import Checkpoint, Experiment
from core.storage import FilesystemStore
from tests.api.checkpoint_support import learner_checkpoint, store_checkpoint
from tests.auth_support import bearer

pytestmark = pytest.mark.integration

Messages = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def parent(client: TestClient, example_spec: dict[str, Any]) -> str:
    response = client.post("/v1/experiments", json=example_spec)
    assert response.status_code == 201, response.text
    value: str = response.json()["id"]
    return value


@pytest.fixture
def stored(
    session: Session,
    storage: FilesystemStore,
    parent: str,
    example_spec: dict[str, Any],
    tmp_path: Path,
) -> tuple[Checkpoint, Checkpoint]:
    """Two checkpoints of the parent: the best (step 1,000) and the latest (step 2,000)."""
    spec = {k: v for k, v in example_spec.items() if k not in ("name", "total_steps")}
    data = learner_checkpoint(tmp_path / "parent.safetensors", spec).read_bytes()
    best = store_checkpoint(session, storage, parent, 1000, data, eval_return=-150.0)
    latest = store_checkpoint(session, storage, parent, 2000, data, eval_return=-900.0)
    return best, latest


def _child(example_spec: dict[str, Any], parent: str, **init: Any) -> dict[str, Any]:
    return {**example_spec, "name": "fine-tune", "init": {"experiment_id": parent, **init}}


def _refused(response: Any) -> dict[str, str]:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_spec"
    return {f["field"]: f["reason"] for f in error["fields"]}


def _count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(Experiment)) or 0)


def test_a_warm_start_is_stored_with_its_checkpoint_resolved_and_queued(
    client: TestClient,
    session: Session,
    example_spec: dict[str, Any],
    parent: str,
    stored: tuple[Checkpoint, Checkpoint],
    queued_messages: Messages,
) -> None:
    best, latest = stored
    for given, row in (({}, latest), ({"checkpoint_id": "best"}, best),
                       ({"checkpoint_id": best.id, "what": "all"}, best)):  # fmt: skip
        response = client.post("/v1/experiments", json=_child(example_spec, parent, **given))
        assert response.status_code == 201, response.text
        body = response.json()
        what = given.get("what", "policy")
        assert body["spec"]["init"] == {
            "experiment_id": parent, "checkpoint_id": row.id, "what": what
        }  # fmt: skip
        assert body["parent"] == {"experiment_id": parent, "checkpoint_id": row.id, "what": what}
        assert client.get(f"/v1/experiments/{body['id']}").json()["parent"] == body["parent"]
        record = ExperimentRepository(session).get(body["id"])
        assert record is not None
        assert (record.init_experiment_id, record.init_checkpoint_id) == (parent, row.id)
        assert any(m["args"][0] == body["id"] for m in queued_messages())
    fresh = client.get(f"/v1/experiments/{parent}").json()
    assert fresh["parent"] is None and fresh["spec"]["init"] is None


def test_the_fit_is_checked_at_submission_with_a_422_naming_the_field(
    client: TestClient,
    session: Session,
    example_spec: dict[str, Any],
    parent: str,
    stored: tuple[Checkpoint, Checkpoint],
) -> None:
    before = _count(session)

    def refused(spec: dict[str, Any]) -> dict[str, str]:
        return _refused(client.post("/v1/experiments", json=spec))

    narrow = _child(example_spec, parent)
    narrow["hyperparameters"] = {**example_spec["hyperparameters"], "hidden_sizes": [32, 32]}
    assert refused(narrow) == {
        "hyperparameters.hidden_sizes": f"must be [64, 64] as in experiment {parent}: the warm "
        "start takes its policy network"
    }
    other_env = _child(example_spec, parent)
    other_env["env"] = {"suite": "gymnasium", "id": "MountainCarContinuous-v0", "num_envs": 1}
    assert list(refused(other_env)) == ["env.id"]
    mappo = _child(example_spec, parent)
    mappo.update(
        algorithm="mappo",
        env={"suite": "mpe", "id": "simple_spread_v3", "num_envs": 2},
        hyperparameters={},
    )
    assert refused(mappo) == {
        "algorithm": f"must be ddpg, the algorithm of experiment {parent} that init starts from"
    }
    assert (
        "pruned"
        in refused(_child(example_spec, parent, checkpoint_id="0" * 26))["init.checkpoint_id"]
    )
    assert list(refused(_child(example_spec, parent, checkpoint_id="first"))) == [
        "init.checkpoint_id"
    ]
    assert list(refused(_child(example_spec, parent, what="critic"))) == ["init.what"]
    assert _count(session) == before, "nothing stored"

    # What a warm start may change: the learning rates, the env's kwargs, copies, the backend.
    tuned = _child(example_spec, parent)
    tuned["hyperparameters"] = {**example_spec["hyperparameters"], "learning_rate_actor": 1e-4}
    tuned["env"] = {**example_spec["env"], "num_envs": 2, "kwargs": {"g": 9.0}}
    tuned["backend"] = "tensorflow"
    assert client.post("/v1/experiments", json=tuned).status_code == 201


def test_a_run_without_checkpoints_or_of_another_project_is_refused_alike(
    client: TestClient,
    anonymous: TestClient,
    keys: dict[str, str],
    session: Session,
    example_spec: dict[str, Any],
    parent: str,
) -> None:
    assert _refused(client.post("/v1/experiments", json=_child(example_spec, parent))) == {
        "init.checkpoint_id": f"experiment {parent} has no checkpoint yet"
    }
    best = _child(example_spec, parent, checkpoint_id="best")
    assert (
        "no checkpoint with an evaluation return"
        in _refused(client.post("/v1/experiments", json=best))["init.checkpoint_id"]
    )
    other = anonymous.post(
        "/v1/experiments", json=_child(example_spec, parent), headers=bearer(keys["other"])
    )
    missing = _child(example_spec, "0" * 26)
    assert _refused(other) == {"init.experiment_id": f"no experiment {parent} in this project"}
    assert _refused(client.post("/v1/experiments", json=missing)) == {
        "init.experiment_id": f"no experiment {'0' * 26} in this project"
    }


def test_the_named_checkpoint_outlives_its_runs_pruning(
    client: TestClient,
    session: Session,
    example_spec: dict[str, Any],
    parent: str,
    stored: tuple[Checkpoint, Checkpoint],
) -> None:
    best, latest = stored
    checkpoints = CheckpointRepository(session)
    assert [r.id for r in checkpoints.beyond(parent, keep_last=1)] == [best.id]
    child = _child(example_spec, parent, checkpoint_id=best.id)
    assert client.post("/v1/experiments", json=child).status_code == 201
    assert checkpoints.beyond(parent, keep_last=1) == []
    assert checkpoints.beyond(parent, keep_last=0) == [latest]


def test_a_sweeps_base_warm_starts_each_of_its_runs(
    client: TestClient,
    example_spec: dict[str, Any],
    parent: str,
    stored: tuple[Checkpoint, Checkpoint],
) -> None:
    _, latest = stored
    base = {k: v for k, v in _child(example_spec, parent).items() if k != "seed"}
    sweep = {
        "name": "fine-tune lr",
        "base": base,
        "space": {"grid": {"hyperparameters.learning_rate_actor": [0.001, 0.0003]}},
        "seeds": 2,
        "max_concurrent": 1,
    }
    response = client.post("/v1/sweeps", json=sweep)
    assert response.status_code == 201, response.text
    runs = client.get(f"/v1/experiments?sweep_id={response.json()['id']}").json()["items"]
    assert len(runs) == 4
    assert all(r["parent"] == {"experiment_id": parent, "checkpoint_id": latest.id,
                               "what": "policy"} for r in runs)  # fmt: skip

    narrow = {**sweep, "space": {"grid": {"hyperparameters.hidden_sizes": [[64, 64], [32, 32]]}}}
    fields = _refused_sweep(client.post("/v1/sweeps", json=narrow))
    assert any("hyperparameters.hidden_sizes" in f for f in fields), fields


def _refused_sweep(response: Any) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {f["field"]: f["reason"] for f in response.json()["error"]["fields"]}
