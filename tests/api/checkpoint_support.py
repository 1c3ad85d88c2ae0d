"""Checkpoints for the API's tests: real learners' files, stored as a worker stores them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from core.experiments.checkpoints import CheckpointRepository
from core.models import Checkpoint
from core.storage import ArtifactStore, checkpoint_key
from learners import checkpoint
from learners.admission.parse import parse_spec
from learners.checkpoint import Manifest, write
from learners.envs.factory import make_vec_env
from learners.registry import entry


def learner_checkpoint(path: Path, spec: dict[str, Any], step: int = 1000) -> Path:
    """A checkpoint of ``spec``'s learner at its initial weights, as its backend writes it."""
    parsed = parse_spec({"name": "checkpoint", "total_steps": 1000, **spec})
    env = make_vec_env(parsed.env, parsed.seed)
    learner = entry(parsed.algorithm).learner_class(parsed.backend)(
        parsed.config(), env.info, "cpu", parsed.seed
    )
    manifest = Manifest(
        algorithm=parsed.algorithm,
        backend=parsed.backend,
        spec=parsed.model_dump(mode="json"),
        env=checkpoint.env_info_to_json(env.info),
        step=step,
        runner={"kind": "test"},
        resumable_on=[parsed.backend],
        policy_backends=sorted(entry(parsed.algorithm).backends),
    )
    write(path, learner.state(), manifest)
    env.close()
    return path


def store_checkpoint(
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    step: int,
    data: bytes,
    eval_return: float | None = None,
) -> Checkpoint:
    """``data`` stored and recorded as ``experiment_id``'s checkpoint at ``step``."""
    stored = storage.put(checkpoint_key(experiment_id, step), lambda p: p.write_bytes(data))
    row = CheckpointRepository(session).record(
        experiment_id, step, stored.key, stored.size_bytes, stored.sha256, eval_return
    )
    session.commit()
    return row
