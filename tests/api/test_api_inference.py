"""``POST .../checkpoints/{cid}/act``: a stored checkpoint's policy acting on observations sent in
the request, as ``load_policy`` acts on the downloaded file (feed-forward and recurrent, discrete
and continuous, dicts and arrays, batches); every misfit a 422 naming the field; bounded batches
and bodies; another project's checkpoint a 404; policies cached within a memory bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.inference import MAX_BATCH, PolicyCache
from core.storage import ArtifactStore
from learners.checkpoint import read_manifest
from learners.envs.factory import make_vec_env
from learners.policy import load_policy
from learners.spec import ExperimentSpec
from tests.api.checkpoint_support import learner_checkpoint, store_checkpoint
from tests.auth_support import bearer

pytestmark = pytest.mark.integration

SPREAD = {
    "suite": "mpe",
    "id": "simple_spread_v3",
    "num_envs": 1,
    "kwargs": {"continuous_actions": False},
}


@pytest.fixture
def experiment_id(client: TestClient, example_spec: dict[str, Any]) -> str:
    response = client.post("/v1/experiments", json=example_spec)
    assert response.status_code == 201
    value: str = response.json()["id"]
    return value


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoints of a discrete MAPPO, a recurrent Weighted QMIX and a continuous DDPG."""
    root = tmp_path_factory.mktemp("inference")
    specs = {
        "mappo": {"algorithm": "mappo", "backend": "torch", "env": SPREAD},
        "wqmix-rnn": {
            "algorithm": "wqmix",
            "backend": "torch",
            "env": SPREAD,
            "hyperparameters": {"recurrent": True, "hidden_sizes": [32, 32]},
        },
        "ddpg": {
            "algorithm": "ddpg",
            "backend": "torch",
            "env": {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 1},
            "hyperparameters": {"hidden_sizes": [32, 32]},
        },
    }
    return {name: learner_checkpoint(root / f"{name}.safetensors", s) for name, s in specs.items()}


def _url(experiment_id: str, checkpoint: str) -> str:
    return f"/v1/experiments/{experiment_id}/checkpoints/{checkpoint}/act"


def _observations(path: Path, batch: int, seed: int = 0) -> list[Any]:
    """``batch`` successive per-agent observation dicts of the checkpoint's env."""
    spec = ExperimentSpec.model_validate(read_manifest(path).spec)
    env = make_vec_env(spec.env, seed)
    info = env.info
    observation = env.reset()
    out = []
    for _ in range(batch):
        out.append({a: observation.obs[0, j].tolist() for j, a in enumerate(info.agent_ids)})
        actions = np.zeros((1, info.num_agents), np.int64)
        observation = env.step(actions)[0]
    env.close()
    return out


def test_a_batch_of_per_agent_observations_gets_the_policys_actions(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    files: dict[str, Path],
) -> None:
    row = store_checkpoint(session, storage, experiment_id, 1000, files["mappo"].read_bytes())
    steps = _observations(files["mappo"], 6)
    batch = {agent: [step[agent] for step in steps] for agent in steps[0]}
    masks = {"agent_1": [[1, 1, 0, 0, 1]] * 6}

    response = client.post(
        _url(experiment_id, row.id), json={"observations": batch, "action_masks": masks}
    )

    assert response.status_code == 200, response.text
    body = response.json()
    expected = load_policy(files["mappo"]).act(
        {a: np.array(v) for a, v in batch.items()},
        {"agent_1": np.array(masks["agent_1"], np.float32)},
    )
    assert body["memory"] is None
    assert body["actions"] == {a: v.tolist() for a, v in expected.items()}
    assert all(a in (0, 1, 4) for a in body["actions"]["agent_1"])
    # One env, no batch axis: one int per agent; the latest alias is the same checkpoint.
    single = client.post(_url(experiment_id, "latest"), json={"observations": steps[0]})
    assert single.status_code == 200
    unmasked = load_policy(files["mappo"]).act({a: np.array(v) for a, v in steps[0].items()})
    assert single.json()["actions"] == unmasked
    assert all(isinstance(v, int) for v in unmasked.values())
    # Nothing of the checkpoint's copy is left on the API host.
    assert [p for p in storage.cache_dir.rglob("*") if p.is_file()] == []


def test_a_recurrent_policy_takes_back_the_memory_it_gave(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    files: dict[str, Path],
) -> None:
    store_checkpoint(session, storage, experiment_id, 1000, files["wqmix-rnn"].read_bytes(), 1.0)
    local = load_policy(files["wqmix-rnn"])  # carries its own memory from call to call
    memory = None
    for step in _observations(files["wqmix-rnn"], 5, seed=3):
        batched = {a: [v] for a, v in step.items()}
        response = client.post(
            _url(experiment_id, "best"), json={"observations": batched, "memory": memory}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        expected = local.act({a: np.array(v) for a, v in batched.items()})
        assert body["actions"] == {a: v.tolist() for a, v in expected.items()}
        assert np.shape(body["memory"]) == (1, 3, 64)
        memory = body["memory"]
    assert np.abs(np.array(memory)).max() > 0


def test_an_array_of_continuous_observations_gets_actions_on_the_envs_bounds(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    files: dict[str, Path],
) -> None:
    row = store_checkpoint(session, storage, experiment_id, 1000, files["ddpg"].read_bytes())
    rng = np.random.default_rng(0)
    observations = rng.uniform(-1.0, 1.0, (MAX_BATCH, 3)).round(6)

    response = client.post(
        _url(experiment_id, row.id), json={"observations": observations.tolist()}
    )

    assert response.status_code == 200, response.text
    actions = np.array(response.json()["actions"])
    assert actions.shape == (MAX_BATCH, 1)
    expected = load_policy(files["ddpg"]).act(observations.astype(np.float32))
    np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-5)
    assert np.abs(actions).max() <= 2.0  # Pendulum's torque bounds


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"observations": {"agent_0": [0.0] * 5}}, "observations.agent_0", "expected (18,)"),
        ({"observations": {"agent_9": [0.0] * 18}}, "observations", "not the env's"),
        ({"observations": {"agent_0": [[0.0] * 18, [0.0]]}}, "observations.agent_0", "one shape"),
        ({"observations": {"agent_0": "abc"}}, "observations.agent_0", "numbers"),
        ({"observations": [[0.0] * 18] * 2}, "observations", "expected (3, 18)"),
        ({"observations": 3}, "observations", "object of per-agent"),
        ({}, "observations", "required"),
        ({"observations": {}, "extra": 1}, "extra", "not a field"),
        (
            {"observations": {"agent_0": [[0.0] * 18]}, "action_masks": {"agent_0": [1, 0]}},
            "action_masks.agent_0",
            "expected (5,)",
        ),
        (
            {"observations": {"agent_0": [0.0] * 18}, "action_masks": {"agent_0": [0] * 5}},
            "action_masks.agent_0",
            "allows no action",
        ),
        ({"observations": {"agent_0": [0.0] * 18}, "memory": [[[0.0]]]}, "memory", "not recurrent"),
        (
            {"observations": {"agent_0": [[0.0] * 18] * (MAX_BATCH + 1)}},
            "observations.agent_0",
            f"more than {MAX_BATCH}",
        ),
        ([1, 2], "body", "JSON object"),
    ],
)
def test_what_does_not_fit_is_a_422_naming_the_field(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    files: dict[str, Path],
    body: Any,
    field: str,
    says: str,
) -> None:
    row = store_checkpoint(session, storage, experiment_id, 1000, files["mappo"].read_bytes())

    response = client.post(_url(experiment_id, row.id), json=body)

    assert response.status_code == 422, response.text
    (problem,) = response.json()["error"]["fields"]
    assert problem["field"] == field and says in problem["reason"], problem


def test_bodies_past_the_bound_are_413_and_bad_json_is_400(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    files: dict[str, Path],
) -> None:
    row = store_checkpoint(session, storage, experiment_id, 1000, files["mappo"].read_bytes())
    url = _url(experiment_id, row.id)
    # Over a megabyte (every other route's bound) is fine here; over eight is not.
    steps = _observations(files["mappo"], 1)[0]
    big = {a: [[x + 0.1234567891234 for x in v]] * MAX_BATCH for a, v in steps.items()}
    assert len(json.dumps({"observations": big})) > 1 << 20
    assert client.post(url, json={"observations": big}).status_code == 200
    huge = b'{"observations": {"agent_0": [' + b"0.0," * (3 << 20) + b"0.0]}}"
    response = client.post(url, content=huge, headers={"content-type": "application/json"})
    assert response.status_code == 413
    nan = b'{"observations": {"agent_0": [NaN]}}'
    response = client.post(url, content=nan, headers={"content-type": "application/json"})
    assert response.status_code == 400


def test_checkpoints_that_are_not_there_are_404s(
    anonymous: TestClient,
    keys: dict[str, str],
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    files: dict[str, Path],
) -> None:
    body = {"observations": _observations(files["mappo"], 1)[0]}
    assert client.post(_url(experiment_id, "best"), json=body).status_code == 404
    assert client.post(_url(experiment_id, "latest"), json=body).status_code == 404
    row = store_checkpoint(session, storage, experiment_id, 1000, files["mappo"].read_bytes())
    # Another project's key: a 404, as for every resource of another project. Acting spends
    # the API's compute, so it is a member's, as every POST (a viewer's key gets a 403).
    other = anonymous.post(_url(experiment_id, row.id), json=body, headers=bearer(keys["other"]))
    assert other.status_code == 404
    viewer = anonymous.post(_url(experiment_id, row.id), json=body, headers=bearer(keys["viewer"]))
    assert viewer.status_code == 403
    member = anonymous.post(_url(experiment_id, row.id), json=body, headers=bearer(keys["member"]))
    assert member.status_code == 200


def test_the_cache_keeps_the_policies_within_its_bound(
    session: Session, storage: ArtifactStore, experiment_id: str, files: dict[str, Path]
) -> None:
    rows = [
        store_checkpoint(session, storage, experiment_id, step, files["mappo"].read_bytes())
        for step in (100, 200, 300)
    ]
    one = PolicyCache(storage, 1 << 30).get(rows[0]).nbytes
    cache = PolicyCache(storage, int(2.5 * one))

    first = cache.get(rows[0])
    assert cache.get(rows[0]) is first  # kept, not loaded again
    cache.get(rows[1])
    cache.get(rows[0])  # used: rows[1] is now the least recently used
    cache.get(rows[2])

    assert cache.cached() == [rows[0].id, rows[2].id]
    assert cache.held_bytes == 2 * one <= cache.max_bytes
    tiny = PolicyCache(storage, one - 1)  # a policy larger than the bound is served, not kept
    assert tiny.get(rows[0]).nbytes == one and tiny.cached() == [] and tiny.held_bytes == 0
