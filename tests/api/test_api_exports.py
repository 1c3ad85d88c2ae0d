"""GET .../checkpoints/{id}/export: the policy-only export of a stored checkpoint, made by the API
process with no framework, the same from a directory and from an S3 bucket (moto's server, its own
process); a clear error for a file that is missing, corrupt or holds no policy, or a format that
does not exist; another project's checkpoint is a 404."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.settings import Settings
from core.storage import ArtifactStore, FilesystemStore
from core.storage.s3 import S3Store
from learners import checkpoint
from learners.admission.parse import parse_spec
from learners.checkpoint import Manifest, read, write
from learners.envs.factory import make_vec_env
from learners.policy import load_policy
from learners.registry import entry
from learners.spec import ExperimentSpec
from tests.api.checkpoint_support import store_checkpoint
from tests.auth_support import bearer
from tests.s3_support import MotoServer

pytestmark = pytest.mark.integration


@pytest.fixture(params=["filesystem", "s3"])
def storage(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> ArtifactStore:
    """The app's store (``client`` is built on it): a directory, then a bucket."""
    if request.param == "filesystem":
        return FilesystemStore(settings.artifacts_dir)
    server: MotoServer = request.getfixturevalue("s3_server")
    url: str = request.getfixturevalue("s3_url")
    return S3Store(url, endpoint_url=server.endpoint, cache_dir=tmp_path / "cache")


@pytest.fixture
def experiment_id(client: TestClient, example_spec: dict[str, Any]) -> str:
    response = client.post("/v1/experiments", json=example_spec)
    assert response.status_code == 201
    value: str = response.json()["id"]
    return value


@pytest.fixture(scope="module")
def ddpg_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real DDPG checkpoint (PyTorch's learner, its replay buffer filled a little)."""
    spec = parse_spec(
        {
            "name": "export",
            "algorithm": "ddpg",
            "backend": "torch",
            "env": {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 1},
            "total_steps": 1000,
            "hyperparameters": {"hidden_sizes": [64, 64]},
        }
    )
    env = make_vec_env(spec.env, spec.seed)
    learner = entry("ddpg").learner_class("torch")(spec.config(), env.info, "cpu", spec.seed)
    path = tmp_path_factory.mktemp("export") / "step-1000.safetensors"
    manifest = Manifest(
        algorithm=spec.algorithm,
        backend=spec.backend,
        spec=spec.model_dump(mode="json"),
        env=checkpoint.env_info_to_json(env.info),
        step=1000,
        runner={"kind": "test"},
        resumable_on=[spec.backend],
        policy_backends=sorted(entry(spec.algorithm).backends),
    )
    tensors = learner.state()
    tensors["replay/obs"] = np.zeros((5000, 1, 3), np.float32)  # a buffer the export leaves out
    write(path, tensors, manifest)
    env.close()
    return path


def test_the_export_is_the_policy_alone_and_acts_as_the_checkpoint_does(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    ddpg_checkpoint: Path,
    tmp_path: Path,
) -> None:
    data = ddpg_checkpoint.read_bytes()
    row = store_checkpoint(session, storage, experiment_id, 1000, data)

    response = client.get(f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/export")

    assert response.status_code == 200, response.text
    body = response.content
    assert response.headers["etag"] == f'"{hashlib.sha256(body).hexdigest()}"'
    assert response.headers["content-length"] == str(len(body))
    assert f"{experiment_id}-step1000-policy.safetensors" in response.headers["content-disposition"]
    exported = tmp_path / "policy.safetensors"
    exported.write_bytes(body)
    tensors, manifest = read(exported)
    assert sorted(tensors) == sorted(n for n in read(ddpg_checkpoint)[0] if n.startswith("actor."))
    assert (manifest.contents, manifest.resumable_on) == ("policy", [])
    assert len(body) * 4 < len(data)
    env = make_vec_env(ExperimentSpec.model_validate(manifest.spec).env, 5)
    observation = env.reset()
    np.testing.assert_array_equal(
        load_policy(exported).act(observation), load_policy(ddpg_checkpoint).act(observation)
    )
    env.close()
    # Nothing is left on the API host: the checkpoint's copy and the export are deleted.
    assert [p for p in storage.cache_dir.rglob("*") if p.is_file()] == []


def test_the_onnx_export_runs_in_onnxruntime_as_the_checkpoint_acts(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    ddpg_checkpoint: Path,
) -> None:
    import onnx
    import onnxruntime

    row = store_checkpoint(session, storage, experiment_id, 1000, ddpg_checkpoint.read_bytes())

    response = client.get(
        f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/export", params={"format": "onnx"}
    )

    assert response.status_code == 200, response.text
    body = response.content
    assert response.headers["etag"] == f'"{hashlib.sha256(body).hexdigest()}"'
    assert f"{experiment_id}-step1000-policy.onnx" in response.headers["content-disposition"]
    model = onnx.load_from_string(body)
    manifest = Manifest.model_validate_json(
        {p.key: p.value for p in model.metadata_props}["marlforge"]
    )
    assert (manifest.contents, manifest.step) == ("policy", 1000)
    session_ = onnxruntime.InferenceSession(body, providers=["CPUExecutionProvider"])
    env = make_vec_env(ExperimentSpec.model_validate(manifest.spec).env, 5)
    observation = env.reset()
    actions, env_actions = session_.run(None, {"obs": observation.obs})
    np.testing.assert_allclose(
        actions, load_policy(ddpg_checkpoint).act(observation), rtol=0, atol=1e-5
    )
    assert env_actions.shape == actions.shape and np.abs(env_actions).max() <= 2.0  # Pendulum
    env.close()
    assert [p for p in storage.cache_dir.rglob("*") if p.is_file()] == []


def test_the_best_checkpoint_exports_under_best(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    ddpg_checkpoint: Path,
) -> None:
    url = f"/v1/experiments/{experiment_id}/checkpoints/best/export"
    store_checkpoint(session, storage, experiment_id, 500, ddpg_checkpoint.read_bytes())
    assert client.get(url).json()["error"]["code"] == "not_found"

    store_checkpoint(
        session, storage, experiment_id, 1000, ddpg_checkpoint.read_bytes(), eval_return=-3.0
    )
    response = client.get(url)

    assert response.status_code == 200
    assert "step1000-policy" in response.headers["content-disposition"]


def test_a_format_that_does_not_exist_is_a_422_naming_it(
    client: TestClient, session: Session, storage: ArtifactStore, experiment_id: str
) -> None:
    row = store_checkpoint(session, storage, experiment_id, 100, b"whatever")

    response = client.get(
        f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/export", params={"format": "pickle"}
    )

    assert response.status_code == 422
    (field,) = response.json()["error"]["fields"]
    assert field["field"] == "format" and "safetensors" in field["reason"]
    assert "onnx" in field["reason"]


def test_missing_corrupt_and_policyless_files_get_their_own_errors(
    client: TestClient,
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    ddpg_checkpoint: Path,
) -> None:
    not_a_checkpoint = store_checkpoint(session, storage, experiment_id, 100, b"not a checkpoint")
    corrupt = store_checkpoint(session, storage, experiment_id, 200, ddpg_checkpoint.read_bytes())
    storage.put(corrupt.path, lambda p: p.write_bytes(b"changed behind the API's back"))
    missing = store_checkpoint(session, storage, experiment_id, 300, ddpg_checkpoint.read_bytes())
    storage.delete(missing.path)

    codes = {
        row.step: client.get(f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/export")
        for row in (not_a_checkpoint, corrupt, missing)
    }

    assert {step: (r.status_code, r.json()["error"]["code"]) for step, r in codes.items()} == {
        100: (409, "export_failed"),
        200: (410, "file_corrupt"),
        300: (404, "file_missing"),
    }
    assert [p for p in storage.cache_dir.rglob("*") if p.is_file()] == []


def test_another_projects_checkpoint_is_a_404(
    anonymous: TestClient,
    keys: dict[str, str],
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    ddpg_checkpoint: Path,
) -> None:
    row = store_checkpoint(session, storage, experiment_id, 1000, ddpg_checkpoint.read_bytes())
    url = f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/export"

    # (Without a key it is a 401, as every project route: tests/api/test_api_auth.py walks them.)
    response = anonymous.get(url, headers=bearer(keys["other"]))
    assert response.status_code == 404
    assert anonymous.get(url, headers=bearer(keys["viewer"])).status_code == 200
